package libroute

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The binding must call every function libroute exports. The exported set
// is the union of what the shared library this test runs against exports
// (nm -D --defined-only) and the global: names of lib/libroute.sym in the
// source tree, so that a function added to either and not bound fails
// here. "Called" means a C.lr_x reference in the package's Go code or a
// call lr_x( in its C shim, with comments stripped and tests left out.
// Functions the public headers mark LR_DEPRECATED are the exception: they
// must be exported and must not be called (the binding uses their
// replacements).
func TestEverySymbolIsBound(t *testing.T) {
	exported := map[string]string{} // symbol -> where it was seen
	var sources []string
	if so := loadedLibrary(t); so != "" {
		syms, err := dynamicSymbols(so)
		if err != nil {
			t.Fatalf("nm -D %s: %v", so, err)
		}
		for _, s := range syms {
			exported[s] = so
		}
		sources = append(sources, so)
	}
	if sym, err := filepath.Abs(filepath.Join("..", "..", "lib", "libroute.sym")); err == nil {
		if syms, err := versionScript(sym); err == nil {
			for _, s := range syms {
				if _, ok := exported[s]; !ok {
					exported[s] = sym
				}
			}
			sources = append(sources, sym)
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if len(sources) == 0 {
		t.Skip("neither the loaded libroute.so (with nm) nor lib/libroute.sym is available")
	}
	if len(exported) < 50 {
		t.Fatalf("only %d lr_ symbols found in %v: parsing is broken", len(exported), sources)
	}
	used, err := boundSymbols(".")
	if err != nil {
		t.Fatal(err)
	}
	deprecated, err := deprecatedFunctions(filepath.Join("..", "..", "include", "libroute"))
	if err != nil {
		t.Fatal(err)
	}
	for s := range deprecated {
		if _, ok := exported[s]; !ok {
			t.Errorf("%s is marked LR_DEPRECATED but not exported", s)
		}
		if used[s] {
			t.Errorf("the binding still calls the deprecated %s", s)
		}
	}
	var missing []string
	for s, where := range exported {
		if !used[s] && !deprecated[s] {
			missing = append(missing, s+" (from "+filepath.Base(where)+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("exported but not bound: %s", m)
	}
	t.Logf("%d exported lr_ symbols checked, from %v", len(exported), sources)
}

// loadedLibrary returns the path of the libroute.so mapped into this
// process (the one the binding really calls), or "" when nm is missing.
func loadedLibrary(t *testing.T) string {
	if _, err := exec.LookPath("nm"); err != nil {
		t.Log("nm not found: checking lib/libroute.sym only")
		return ""
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Logf("no /proc/self/maps (%v): checking lib/libroute.sym only", err)
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.HasPrefix(filepath.Base(fields[5]), "libroute.so") {
			return fields[5]
		}
	}
	t.Fatal("libroute.so is not mapped into the test binary")
	return ""
}

func dynamicSymbols(so string) ([]string, error) {
	out, err := exec.Command("nm", "-D", "--defined-only", so).Output()
	if err != nil {
		return nil, err
	}
	var syms []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		name := f[2]
		if i := strings.IndexByte(name, '@'); i >= 0 {
			name = name[:i]
		}
		if strings.HasPrefix(name, "lr_") {
			syms = append(syms, name)
		}
	}
	return syms, nil
}

var symLine = regexp.MustCompile(`^\s*(lr_[A-Za-z0-9_]+)\s*;`)

// versionScript returns the names listed under global: in a version script.
func versionScript(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var syms []string
	global := false
	for _, line := range strings.Split(string(data), "\n") {
		switch l := strings.TrimSpace(line); {
		case l == "global:":
			global = true
		case l == "local:" || strings.HasPrefix(l, "}"):
			global = false
		case global:
			if m := symLine.FindStringSubmatch(line); m != nil {
				syms = append(syms, m[1])
			}
		}
	}
	return syms, nil
}

var (
	deprecatedDecl = regexp.MustCompile(`LR_DEPRECATED\s*\([^)]*\)[^;(]*?\b(lr_[A-Za-z0-9_]+)\s*\(`)
	deprecatedDef  = regexp.MustCompile(`#\s*define\s+LR_DEPRECATED[^\n]*`)
)

// deprecatedFunctions returns the functions the headers in dir mark
// LR_DEPRECATED (none when dir does not exist: not a source tree).
func deprecatedFunctions(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.h"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		src := deprecatedDef.ReplaceAllString(string(data), "")
		for _, m := range deprecatedDecl.FindAllStringSubmatch(src, -1) {
			out[m[1]] = true
		}
	}
	return out, nil
}

// The header scan finds the one deprecated function of 0.2.
func TestDeprecatedFunctions(t *testing.T) {
	d, err := deprecatedFunctions(filepath.Join("..", "..", "include", "libroute"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("..", "..", "include", "libroute")); err != nil {
		t.Skip("include/libroute not found (not a source tree)")
	}
	if !d["lr_router_param_bounds"] {
		t.Errorf("deprecated functions found: %v", d)
	}
}

var (
	goRef = regexp.MustCompile(`\bC\.(lr_[A-Za-z0-9_]+)\b`)
	cCall = regexp.MustCompile(`\b(lr_[A-Za-z0-9_]+)\s*\(`)
)

// boundSymbols returns the lr_ names the package's non-test sources use.
func boundSymbols(dir string) (map[string]bool, error) {
	used := map[string]bool{}
	for _, pat := range []string{"*.go", "*.c"} {
		files, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			re := goRef
			if strings.HasSuffix(f, ".c") {
				re = cCall
			}
			for _, m := range re.FindAllStringSubmatch(stripComments(string(data)), -1) {
				used[m[1]] = true
			}
		}
	}
	return used, nil
}

// stripComments blanks // and /* */ comments in Go or C source, leaving
// string and character literals alone. (In Go this also drops the cgo
// preambles, which hold only #include lines here.)
func stripComments(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(src) {
				j = len(src) - 1
			}
			b.WriteString(src[i : j+1])
			i = j
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += end + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// The scanner itself: a name in a comment or a string is not a use.
func TestStripComments(t *testing.T) {
	src := "a := C.lr_a() // C.lr_b()\n/* C.lr_c() */ s := \"// C.lr_d\" + `/*` + C.lr_e"
	used := map[string]bool{}
	for _, m := range goRef.FindAllStringSubmatch(stripComments(src), -1) {
		used[m[1]] = true
	}
	if !used["lr_a"] || used["lr_b"] || used["lr_c"] || !used["lr_e"] {
		t.Errorf("scanned %v from %q", used, stripComments(src))
	}
}
