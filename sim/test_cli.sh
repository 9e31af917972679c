#!/bin/sh
# lrsim's command line: usage errors exit 2 with a message naming the
# problem; a malformed trace names file:line; failed runs leave no output
# files (not even FILE.tmp); a good run writes valid JSON and SVG.
#
#   test_cli.sh LRSIM SRCDIR [LRSIM_FIT]
set -u
lrsim=$1
srcdir=$2
fit=${3:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lrsim-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect STATUS PATTERN -- ARGS...: run lrsim, check exit status and that
# stderr matches PATTERN (a grep -E expression; empty: anything).
expect()
{
    want=$1
    pat=$2
    shift 3
    "$lrsim" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: lrsim $*: exit $got, wanted $want"
        sed 's/^/  stderr: /' "$tmp/err"
        fails=$((fails + 1))
        return
    fi
    if [ -n "$pat" ] && ! grep -Eq -- "$pat" "$tmp/err"; then
        echo "FAIL: lrsim $*: stderr does not match /$pat/:"
        sed 's/^/  stderr: /' "$tmp/err"
        fails=$((fails + 1))
    fi
}

no_files()
{
    for f in "$@"; do
        if [ -e "$f" ]; then
            echo "FAIL: $f was left behind"
            fails=$((fails + 1))
        fi
    done
}

expect 0 '' -- --help
grep -q -- '--cluster SPEC' "$tmp/out" || { echo "FAIL: --help text"; fails=$((fails + 1)); }
expect 0 '' -- --version
expect 0 '' -- --list-workloads
grep -q '^conversation' "$tmp/out" || { echo "FAIL: --list-workloads"; fails=$((fails + 1)); }
expect 0 '' -- --list-classes
expect 0 '' -- --list-policies
grep -q '^dualmap' "$tmp/out" || { echo "FAIL: --list-policies"; fails=$((fails + 1)); }
grep -Eq '^lodestar *$' "$tmp/out" || { echo "FAIL: lodestar not supported"; fails=$((fails + 1)); }

# engine classes of your own: a slots class (llama.cpp) in a cluster; its
# delivered against predicted hits in the JSON; bad files exit 2
cat >"$tmp/cls" <<'EOF2'
# two classes
name = cpua   # paged, a100's figures but the prefill
prefill_us = 900
name = cpub
max_batch = 2
cache = slots
host_cache_tokens = 4096
EOF2
expect 0 '' -- --class-file "$tmp/cls" --list-classes
grep -Eq '^cpub .*slots, host cache 4096' "$tmp/out" || { echo "FAIL: --list-classes with a class file"; fails=$((fails + 1)); }
expect 0 '' -- --class-file "$tmp/cls" --class-file "$tmp/cls" --cluster 1xcpua+2xcpub \
    --requests 120 --policies prefix-cache-and-load --quiet --json "$tmp/cls.json"
grep -q '"delivered_per_predicted"' "$tmp/cls.json" || { echo "FAIL: no delivered_per_predicted"; fails=$((fails + 1)); }
printf 'max_batch = 2\n' >"$tmp/bad1"
expect 2 "bad1:1: name = NAME must come first" -- --class-file "$tmp/bad1" --list-classes
printf 'name = x\ncache = radix\n' >"$tmp/bad2"
expect 2 "bad2:2: cache: paged or slots" -- --class-file "$tmp/bad2" --list-classes
printf 'name = v100\n' >"$tmp/bad3"
expect 2 "class v100 is defined already" -- --class-file "$tmp/bad3" --list-classes
expect 2 "--class-file: .*nothere" -- --class-file "$tmp/nothere" --list-classes

expect 2 "unknown option '--bogus'" -- --bogus
expect 2 "--requests: expected a whole number, got 'abc'" -- --requests abc
expect 2 "--requests: 0 is out of range" -- --requests 0
expect 2 "--rate: expected a positive number" -- --rate -3
expect 2 "--time-scale: expected a positive number" -- --time-scale=nan
expect 2 "--seed needs a value" -- --seed
expect 2 "unknown class \"foo\"" -- --cluster 4xfoo
# lrsim's limit: 4096 instances, one more refused whichever way it is given
expect 2 'bad cluster "4097": count must be 1\.\.4096 \(lrsim.s limit of instances\)' -- --cluster 4097
expect 2 'bad cluster "4000\+97": more than 4096 instances \(lrsim.s limit\)' -- --cluster 4000+97
expect 2 'regions:K needs K in 1\.\.1365' -- --cluster regions:1366
expect 2 "unknown workload 'nope'" -- --workload nope
expect 2 "--adapter-by: request or prompt, got 'tenant'" -- --adapter-by tenant
expect 2 "--models: expected a count 1..4" -- --models 5
expect 2 "--max-loras: 300 is out of range" -- --max-loras 300
expect 2 "--adapter-share: expected a number >= 0" -- --adapter-share 2
# LoRA: the loads column and JSON fields with adapters; none without
expect 0 '' -- --workload wildchat --requests 200 --adapters 10 \
    --policies least-request,lora-affinity --json "$tmp/lora.json"
grep -q 'loads = LoRA adapters' "$tmp/out" && grep -q '"adapter_loads"' "$tmp/lora.json" ||
    { echo "FAIL: LoRA run without its loads"; fails=$((fails + 1)); }
expect 0 '' -- --workload wildchat --requests 200 --policies least-request \
    --json "$tmp/plain.json"
grep -q 'adapter' "$tmp/out" "$tmp/plain.json" &&
    { echo "FAIL: adapter fields in a run without adapters"; fails=$((fails + 1)); }
expect 2 "unknown policy 'nope'" -- --policies random,nope
expect 2 "given twice" -- --policies random,random
expect 2 "not both" -- --workload wildchat --trace x.jsonl
expect 2 "--rate applies to generated workloads" -- --trace x.jsonl --rate 3
expect 2 "unexpected argument 'stray'" -- stray
expect 2 "$tmp/none.jsonl: No such file" -- --trace "$tmp/none.jsonl"

# A malformed line: file:line and the reason; no output files.
cat >"$tmp/bad.jsonl" <<'JSON'
{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0]}
JSON
expect 2 "bad.jsonl:2: hash_ids has 1 ids but input_length 600 needs" -- \
    --trace "$tmp/bad.jsonl" --json "$tmp/o.json" --svg "$tmp/o.svg"
no_files "$tmp/o.json" "$tmp/o.json.tmp" "$tmp/o.svg" "$tmp/o.svg.tmp"

# An output file that cannot be written: exit 1, nothing renamed.
expect 1 "o.json.tmp" -- --workload wildchat --requests 50 \
    --policies random --json "$tmp/nodir/o.json" --svg "$tmp/o.svg"
no_files "$tmp/o.svg" "$tmp/o.svg.tmp"

# A good run: a table, a JSON document with the promised keys, an SVG.
cat >"$tmp/good.jsonl" <<'JSON'
{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 10, "input_length": 1100, "output_length": 9, "hash_ids": [0, 1, 2]}
{"timestamp": 30, "input_length": 700, "output_length": 20, "hash_ids": [0, 3]}
JSON
expect 0 '' -- --trace "$tmp/good.jsonl" --policies least-request,dualmap \
    --json "$tmp/g.json" --svg "$tmp/g.svg" --cluster 2
grep -q '^least-request' "$tmp/out" || { echo "FAIL: no table row"; fails=$((fails + 1)); }
for k in policy ttft_mean_s ttft_p50_s ttft_p95_s ttft_p99_s tpot_mean_s \
    tpot_p50_s tpot_p99_s e2e_p50_s e2e_p95_s cache_hit_rate load_cv \
    slo_attainment route_ns_p50 runs; do
    grep -q "\"$k\"" "$tmp/g.json" || { echo "FAIL: JSON lacks $k"; fails=$((fails + 1)); }
done
if command -v python3 >/dev/null 2>&1; then
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['runs']) == 2 and d['runs'][0]['requests'] == 3" \
        "$tmp/g.json" || { echo "FAIL: JSON does not parse"; fails=$((fails + 1)); }
fi
grep -q '</svg>' "$tmp/g.svg" || { echo "FAIL: SVG incomplete"; fails=$((fails + 1)); }
no_files "$tmp/g.json.tmp" "$tmp/g.svg.tmp"

# A generated workload with every flag; all policies (unsupported ones are
# skipped with a note on stderr).
expect 0 '' -- --workload system-prompts --requests 200 --rate 20 \
    --time-scale 2 --seed 7 --slo-ttft 2 --scrape-ms 50 --block-tokens 32 \
    --index-blocks 100000 --jobs 2 --quiet --no-rebalance
[ -s "$tmp/out" ] && { echo "FAIL: --quiet printed a table"; fails=$((fails + 1)); }

# --param: a name table over every router parameter; the library judges
# the value. Unknown names, bad values and out-of-range ones exit 2.
expect 2 "--param: unknown parameter 'nope'" -- --param nope=1
expect 2 "--param: lodestar-epsilon: expected a number, got 'abc'" -- \
    --param lodestar-epsilon=abc
expect 2 "--param: lodestar-epsilon: 2 is out of range \(0\.\.1\)" -- \
    --param lodestar-epsilon=2
expect 2 "--param: lodestar-candidates: 2.5 is not a valid value" -- \
    --param lodestar-candidates=2.5
expect 2 "--param: expected NAME=VALUE" -- --param lodestar-epsilon
expect 2 "--lodestar-min: 0 is out of range" -- --lodestar-min 0
expect 2 "--lodestar-epochs: expected a whole number" -- --lodestar-epochs x
expect 2 "--lodestar-freeze-s: expected a number >= 0" -- --lodestar-freeze-s -1
expect 2 "--learn-ms: expected a positive number" -- --learn-ms 0
expect 2 "--dump-samples needs lodestar" -- --policies random \
    --dump-samples "$tmp/s.csv"
no_files "$tmp/s.csv" "$tmp/s.csv.tmp"

# --router-rates: what every router (or one policy's) is told of class
# speeds. Bad modes, scales the library refuses and unknown policies exit
# 2. Told nothing, min-ttft decides differently on a heterogeneous
# cluster; least-request, which never reads a rate, does not change.
expect 2 "--router-rates: expected nominal, none or scale:X, got 'bogus'" -- \
    --router-rates bogus
expect 2 "--router-rates: scale:X needs a number X > 0, got '0'" -- \
    --router-rates scale:0
expect 2 "scale:X needs a number X > 0, got '-2'" -- --router-rates scale:-2
expect 2 "scale:X needs a number X > 0, got 'x'" -- --router-rates scale:x
expect 2 "scale:1e12: the router refuses class h100" -- --router-rates scale:1e12
expect 2 "--router-rates: unknown policy 'nope' in 'nope=none'; known: random" -- \
    --router-rates nope=none
expect 2 "--router-rates: min-ttft: expected nominal" -- \
    --router-rates min-ttft=fast
rr="--workload share-mixed --cluster hetero --rate 10 --requests 300
    --policies min-ttft,least-request --jobs 2 --quiet"
expect 0 '' -- $rr --json "$tmp/rn.json"
expect 0 '' -- $rr --router-rates none --json "$tmp/r0.json"
expect 0 '' -- $rr --router-rates none --router-rates min-ttft=nominal \
    --json "$tmp/ro.json"
expect 0 '' -- $rr --router-rates=scale:1 \
    --router-rates=least-request=scale:0.25 --json "$tmp/rs.json"
expect 0 '' -- --workload share-mixed --cluster hetero --requests 50 \
    --policies min-ttft,random --router-rates scale:0.5 \
    --router-rates random=none
grep -q 'class rates told to the router (--router-rates): min-ttft scale:0.5, random none' \
    "$tmp/out" || { echo "FAIL: --router-rates in the table header"; fails=$((fails + 1)); }
if command -v python3 >/dev/null 2>&1; then
    python3 -c "
import json, sys
def load(p):
    return {r['policy']: r for r in json.load(open(p))['runs']}
def same(a, b):
    keys = ('ttft_mean_s', 'ttft_p50_s', 'ttft_p99_s', 'cache_hit_rate',
            'load_cv', 'preemptions')
    return all(a[k] == b[k] for k in keys) and \
        [i['requests'] for i in a['instances']] == \
        [i['requests'] for i in b['instances']]
n, z, o, s = (load(p) for p in sys.argv[1:])
assert n['min-ttft']['router_rates'] == 'nominal'
assert z['min-ttft']['router_rates'] == 'none'
assert not same(n['min-ttft'], z['min-ttft']), 'none left min-ttft unchanged'
assert same(n['least-request'], z['least-request']), 'none moved least-request'
assert o['min-ttft']['router_rates'] == 'nominal'
assert o['least-request']['router_rates'] == 'none'
assert same(o['min-ttft'], n['min-ttft'])
assert s['min-ttft']['router_rates'] == 'scale:1'
assert s['least-request']['router_rates'] == 'scale:0.25'
assert same(s['min-ttft'], n['min-ttft']) and same(s['least-request'], n['least-request'])
" "$tmp/rn.json" "$tmp/r0.json" "$tmp/ro.json" "$tmp/rs.json" ||
        { echo "FAIL: --router-rates results"; fails=$((fails + 1)); }
fi

# The regime suite on a tiny cells file: 2 cells x 2 seeds x 2 policies.
# The table: two ratio tables (mean, p99), every ratio >= 1, exactly one
# 1.000 per cell column (min-ttft is best on both seeds of both cells),
# the worst cell named; the JSON: every run tagged with its cell and seed,
# and ratios that follow from the runs. The job count changes nothing.
cat >"$tmp/cells.txt" <<'CELLS'
# two small cells; the second named
--workload conversation --cluster 8 --requests 200

hot: --workload share-mixed --cluster hetero --rate 10 --requests 200  # hetero
CELLS
suite="--suite-cells $tmp/cells.txt --seeds 1,2 --policies least-request,min-ttft
    --router-rates least-request=scale:2"
expect 0 'suite \[2/2\]' -- $suite --jobs 2 --json "$tmp/suite.json"
cp "$tmp/out" "$tmp/suite2.txt"
grep -q '^  class rates told to the router (--router-rates): nominal; least-request: scale:2$' \
    "$tmp/suite2.txt" || { echo "FAIL: suite: router rates line"; fails=$((fails + 1)); }
grep -q '^    2 hot  *--workload share-mixed --cluster hetero --rate 10 --requests 200$' \
    "$tmp/suite2.txt" || { echo "FAIL: suite: cell legend"; fails=$((fails + 1)); }
grep -q 'median over seeds 1, 2 of the per-seed ratio' "$tmp/suite2.txt" ||
    { echo "FAIL: suite: the table does not say it takes a median"; fails=$((fails + 1)); }
expect 0 '' -- $suite --jobs 1 --json "$tmp/suite1.json"
cmp -s "$tmp/out" "$tmp/suite2.txt" ||
    { echo "FAIL: suite: the table depends on --jobs"; fails=$((fails + 1)); }
no_files "$tmp/suite.json.tmp"
if command -v python3 >/dev/null 2>&1; then
    python3 -c "
import json, statistics, sys
table = open(sys.argv[1]).read().split('\n')
tabs = [i for i, l in enumerate(table) if l.startswith('TTFT ')]
assert len(tabs) == 2, tabs
assert 'mean' in table[tabs[0]] and 'p99' in table[tabs[1]]
for t in tabs:
    assert table[t + 1].split()[:3] == ['policy', '1', '2'], table[t + 1]
    rows = {}
    for l in table[t + 2:t + 4]:
        w = l.replace('*', ' ').replace('|', ' ').split()
        rows[w[0]] = w
    assert sorted(rows) == ['least-request', 'min-ttft'], rows
    for name, w in rows.items():
        cells, geo, worst, where = [float(x) for x in w[1:3]], float(w[3]), float(w[4]), w[5]
        assert all(x >= 1 for x in cells + [geo, worst]), w
        assert worst == max(cells) and where in ('conversation/8', 'hot'), w
    for col in (1, 2):
        assert [rows[n][col] for n in rows].count('1.000') == 1, (col, rows)
    assert rows['min-ttft'][1:3] == ['1.000', '1.000'], rows
    assert table[t + 4].startswith('= best TTFT (s)'), table[t + 4]
tp = [i for i, l in enumerate(table) if l.startswith('TPOT p99 / the best')]
assert len(tp) == 1 and table[tp[0] + 1].split()[:3] == ['policy', '1', '2'], tp
assert table[tp[0] + 4].startswith('= best TPOT (s)'), table[tp[0] + 4]

def timeless(x):
    skip = {'wall_s', 'jobs', 'route_ns_p50', 'route_ns_p99', 'route_ns_mean',
            'learn_wall_s', 'step_wall_s'}
    if isinstance(x, dict):
        return {k: timeless(v) for k, v in x.items() if k not in skip}
    if isinstance(x, list):
        return [timeless(v) for v in x]
    return x
d = json.load(open(sys.argv[2]))
assert timeless(d) == timeless(json.load(open(sys.argv[3]))), 'JSON depends on --jobs'
assert d['suite'] is True and d['seeds'] == [1, 2]
assert [c['name'] for c in d['cells']] == ['conversation/8', 'hot']
assert d['cells'][1]['where'].endswith('cells.txt:4'), d['cells'][1]
assert len(d['runs']) == 8
runs = {(r['cell'], r['seed'], r['policy']): r for r in d['runs']}
assert len(runs) == 8
for r in d['runs']:
    assert r['requests'] == 200 and 'instances' in r and 'ttft_p99_s' in r
    want = 'scale:2' if r['policy'] == 'least-request' else 'nominal'
    assert r['router_rates'] == want, r['router_rates']
for key, m in (('ttft_mean', 'ttft_mean_s'), ('ttft_p99', 'ttft_p99_s'),
               ('tpot_p99', 'tpot_p99_s')):
    t = d['ratios'][key]
    for c in ('conversation/8', 'hot'):
        best = [min(runs[(c, s, p)][m] for p in ('least-request', 'min-ttft'))
                for s in (1, 2)]
        assert abs(t['best_s'][c] - statistics.median(best)) < 1e-4 * best[0]
    for p in t['policies']:
        for c in ('conversation/8', 'hot'):
            ratios = [runs[(c, s, p['policy'])][m] / best_s
                      for s, best_s in zip((1, 2),
                          [min(runs[(c, s, q)][m] for q in ('least-request', 'min-ttft'))
                           for s in (1, 2)])]
            assert all(abs(a - b) < 1e-4 * a for a, b in zip(ratios, p['per_seed'][c])), (ratios, p)
            assert abs(statistics.median(ratios) - p['cells'][c]) < 1e-4 * p['cells'][c]
        assert p['worst'] == max(p['cells'].values())
        assert p['cells'][p['worst_cell']] == p['worst']
" "$tmp/suite2.txt" "$tmp/suite.json" "$tmp/suite1.json" ||
        { echo "FAIL: suite table or JSON"; fails=$((fails + 1)); }
fi

# Suite usage errors exit 2 before any run, name the cell's FILE:LINE,
# and leave no file.
printf -- '--workload wildchat\n--workload nope\n' >"$tmp/c.txt"
expect 2 "c.txt:2: --workload: unknown workload 'nope'" -- \
    --suite-cells "$tmp/c.txt" --json "$tmp/c.json"
no_files "$tmp/c.json" "$tmp/c.json.tmp"
printf -- '--workload wildchat --jobs 2\n' >"$tmp/c.txt"
expect 2 "c.txt:1: --jobs has no place in a suite cell" -- --suite-cells "$tmp/c.txt"
printf -- 'a: --workload wildchat\na: --workload tools-zipf\n' >"$tmp/c.txt"
expect 2 "c.txt:2: cell name 'a' is taken by c.txt:1" -- --suite-cells "$tmp/c.txt"
printf -- '--workload wildchat\n--workload wildchat --requests 9\n' >"$tmp/c.txt"
expect 2 "cell name 'wildchat' is taken .* NAME: prefix" -- --suite-cells "$tmp/c.txt"
printf -- 'name --workload wildchat\n' >"$tmp/c.txt"
expect 2 "c.txt:1: expected 'NAME:' or an option, got 'name'" -- --suite-cells "$tmp/c.txt"
printf -- "--trace 'a b.jsonl\n" >"$tmp/c.txt"
expect 2 "c.txt:1: unterminated ' quote" -- --suite-cells "$tmp/c.txt"
printf -- '# nothing\n\n' >"$tmp/c.txt"
expect 2 "c.txt: no cells" -- --suite-cells "$tmp/c.txt"
printf -- '--trace x.jsonl\n' >"$tmp/c.txt"
expect 2 "c.txt:1: --rate applies to generated workloads" -- \
    --suite-cells "$tmp/c.txt" --rate 3
expect 2 "none.txt: No such file" -- --suite-cells "$tmp/none.txt"
expect 2 "--seeds is for --suite" -- --seeds 1,2
expect 2 "--suite: --workload has no place here" -- --suite --workload wildchat
expect 2 "--suite: --svg has no place here" -- --suite --svg "$tmp/s.svg"
expect 2 "give --seed or --seeds, not both" -- --suite --seed 1 --seeds 2,3
expect 2 "--seeds: 1 given twice" -- --suite --seeds 1,1
expect 2 "--seeds: expected a whole number, got 'x'" -- --suite --seeds 1,x
expect 2 "unknown policy 'nope'" -- --suite --policies least-request,nope

# Lodestar learns in a short run; its samples dump as CSV (20 features and
# the reward), its curve goes to the JSON, and every parameter applies.
expect 0 '' -- --workload share-mixed --requests 300 --rate 1.5 \
    --cluster 2xa30+2xv100-nocache --policies lodestar,least-request \
    --lodestar-min 60 --lodestar-every 60 --lodestar-epochs 3 \
    --param lodestar-epsilon=0.05 --param=aibrix-imbalance=4 \
    --param lodestar-fallback=least-request --split-s 100 --curve --reasons \
    --dump-samples "$tmp/s.csv" --json "$tmp/l.json"
grep -q 'model rounds' "$tmp/out" || { echo "FAIL: no lodestar summary"; fails=$((fails + 1)); }
grep -q 'learning curve' "$tmp/out" || { echo "FAIL: no --curve table"; fails=$((fails + 1)); }
grep -q 'decision reasons' "$tmp/out" || { echo "FAIL: no --reasons"; fails=$((fails + 1)); }
grep -q 'before 100 s' "$tmp/out" || { echo "FAIL: no --split-s table"; fails=$((fails + 1)); }
head -1 "$tmp/s.csv" | grep -q '^prompt_tokens,.*,class7,reward$' || { echo "FAIL: CSV header"; fails=$((fails + 1)); }
bad_rows=$(awk -F, '{ if (NF != 21) n++ } END { print n + 0 }' "$tmp/s.csv")
rows=$(($(wc -l <"$tmp/s.csv") - 1))
[ "$bad_rows" -eq 0 ] && [ "$rows" -ge 60 ] || { echo "FAIL: CSV: $rows rows, $bad_rows not of 21 columns"; fails=$((fails + 1)); }
if command -v python3 >/dev/null 2>&1; then
    python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
r = [x for x in d['runs'] if x['policy'] == 'lodestar'][0]
l = r['lodestar']
assert l['min_samples'] == 60 and l['model_rounds'] >= 1, l
assert len(l['curve']) == l['learn_steps'] + 1
assert 'split' in r and r['split']['at_s'] == 100
assert all('lodestar' not in x for x in d['runs'] if x['policy'] != 'lodestar')
" "$tmp/l.json" || { echo "FAIL: lodestar JSON"; fails=$((fails + 1)); }
fi
no_files "$tmp/s.csv.tmp" "$tmp/l.json.tmp"

# lrsim-fit on the dumped samples and on a tiny CSV; bad input exits 2.
if [ -n "$fit" ]; then
    fexpect()
    {
        want=$1
        pat=$2
        shift 3
        "$fit" "$@" >"$tmp/out" 2>"$tmp/err"
        got=$?
        if [ "$got" -ne "$want" ] || { [ -n "$pat" ] && ! grep -Eq -- "$pat" "$tmp/err"; }; then
            echo "FAIL: lrsim-fit $*: exit $got (wanted $want), stderr:"
            sed 's/^/  stderr: /' "$tmp/err"
            fails=$((fails + 1))
        fi
    }
    fexpect 0 '' -- "$tmp/s.csv" --epochs 2
    grep -q 'held-out MSE: network / linear' "$tmp/out" || { echo "FAIL: lrsim-fit output"; fails=$((fails + 1)); }
    printf 'a,b,y\n' >"$tmp/t.csv"
    for i in 0 1 2 3 4 5 6 7 8 9; do
        printf '%s,%s,%s\n' "$i" "$((i * i))" "$((2 * i + 1))" >>"$tmp/t.csv"
    done
    fexpect 0 '' -- --seed 3 --test-frac 0.3 --epochs 3 "$tmp/t.csv"
    grep -q '10 rows x 2 features; 7 train, 3 held out' "$tmp/out" || { echo "FAIL: lrsim-fit split"; fails=$((fails + 1)); }
    fexpect 0 '' -- --help
    fexpect 2 'usage' --
    fexpect 2 "unknown option '--bogus'" -- --bogus "$tmp/t.csv"
    fexpect 2 '--test-frac: expected a number' -- --test-frac 1 "$tmp/t.csv"
    fexpect 2 'No such file' -- "$tmp/none.csv"
    printf 'a,y\n1,2\n3\n' >"$tmp/bad.csv"
    fexpect 2 'bad.csv:3: 1 columns, the header has 2' -- "$tmp/bad.csv"
    printf 'a,y\n1,2\n' >"$tmp/one.csv"
    fexpect 2 'too few to split' -- "$tmp/one.csv"
fi

# Request classes, tenants, bursts and the router's queue: bad values exit
# 2; a run with them prints and writes the admission figures, and a suite
# cell takes them; without them neither the table nor the JSON has any.
expect 2 "--admit: now or queue, got 'later'" -- --admit later
expect 2 "--mix: class chat: give its urgency and SLO" -- --mix chat=1
expect 2 "--mix: class x: urgency '9' is not 0..7" -- --mix x=1:9:2
expect 2 "--mix: the shares sum to 0" -- --mix interactive=0,batch=0
expect 2 "--tenants: expected a count 1..64" -- --tenants 0
expect 2 "--tenants: weight 'x' is not a number" -- --tenants 1,x
expect 2 "--burst: expected X\\[:PERIOD_S\\] with X >= 1" -- --burst 0.5
expect 0 '' -- --workload share-mixed --cluster 2 --rate 30 --requests 200 \
    --mix interactive=0.3,batch=0.7:shed --tenants 10,1,1,1 --burst 2:20 \
    --admit queue --policies least-request,adaptive --json "$tmp/adm.json"
for k in '"admission": {' '"admit": "queue"' '"slo_attainment"' '"goodput_rps"' \
    '"jain"' '"service_share"' '"expired"' '"shed"' '"waited"' '"mix": "classes'; do
    grep -qF "$k" "$tmp/adm.json" || { echo "FAIL: no $k in the admission JSON"; fails=$((fails + 1)); }
done
for k in 'admission (--admit): queue' 'interactive (2 s)' 'tenant 0 (' 'jain'; do
    grep -qF "$k" "$tmp/out" || { echo "FAIL: no '$k' in the admission table"; fails=$((fails + 1)); }
done
# --queue-tokens sizes each router's queue: a small one fails requests
# that the default holds
expect 2 "--queue-tokens" -- --queue-tokens 0
for q in 0 4000; do
    set -- --workload share-mixed --cluster 2 --rate 60 --requests 200 \
        --admit queue --policies least-request --json "$tmp/q$q.json"
    [ "$q" = 0 ] || set -- "$@" --queue-tokens "$q"
    expect 0 '' -- "$@"
done
grep -q '"served": 200, .*"failed": 0' "$tmp/q0.json" &&
    ! grep -q '"failed": 0,' "$tmp/q4000.json" ||
    { echo "FAIL: --queue-tokens"; fails=$((fails + 1)); }
# the replica suite: one router and four sharing each way; where some
# requests were not served it says how many, since its means are of the
# others
for q in 16000000 4000; do
    expect 0 '' -- --replica-suite --workload share-mixed --cluster 2 \
        --rate 60 --requests 200 --admit queue --policies least-request \
        --queue-tokens "$q" --jobs 2
    grep -q '^least-request  .* | .*(.*) .*(.*)' "$tmp/out" ||
        { echo "FAIL: the replica suite's table"; fails=$((fails + 1)); }
    if grep -q '^not served' "$tmp/out"; then
        [ "$q" = 4000 ] ||
            { echo "FAIL: 'not served' with every request served"; fails=$((fails + 1)); }
    elif [ "$q" = 4000 ]; then
        echo "FAIL: the replica suite hides unserved requests"
        fails=$((fails + 1))
    fi
done
expect 0 '' -- --workload share-mixed --cluster 2 --requests 100 \
    --policies least-request --json "$tmp/plain.json"
if grep -q 'admission' "$tmp/plain.json" "$tmp/out"; then
    echo "FAIL: admission figures without classes, tenants or --admit queue"
    fails=$((fails + 1))
fi
printf 'q: --workload share-mixed --cluster 2 --rate 30 --requests 150 --mix interactive=1 --admit queue\nn: --workload share-mixed --cluster 2 --rate 30 --requests 150 --mix interactive=1\n' >"$tmp/adm.cells"
expect 0 '' -- --suite-cells "$tmp/adm.cells" --policies least-request,adaptive --jobs 1
grep -q '^Admission cells' "$tmp/out" && grep -q '1 q (--admit queue)' "$tmp/out" &&
    grep -q '2 n (--admit now)' "$tmp/out" || { echo "FAIL: the suite's admission table"; fails=$((fails + 1)); }

# Disaggregated fleets: roles and placement, the KV link flags, what a
# split fleet refuses; the JSON and the table carry the splits.
expect 0 '' -- --workload conversation --requests 80 --policies llm-d-pd,adaptive \
    --cluster 1xa100:p/rack2+1xa100:d --kv-gbps-region 5 --kv-setup-ms 2 \
    --param pd-prefill-policy=least-load --jobs 1 --json "$tmp/pd.json"
grep -q '"split": ' "$tmp/pd.json" && grep -q '"kv_transfer_mean_s": ' "$tmp/pd.json" &&
    grep -q 'split%' "$tmp/out" || { echo "FAIL: no split figures"; fails=$((fails + 1)); }
expect 2 'role' -- --cluster 1xa100:x+1xa100:d
expect 2 'kv-gbps-rack' -- --kv-gbps-rack 0
expect 2 'unknown option' -- --kv-gbps-moon 3
expect 1 'prefill instances only' -- --cluster 2xa100:p --requests 10 --policies adaptive
expect 1 'admit queue' -- --cluster 1xa100:p+1xa100:d --admit queue --requests 10 \
    --policies adaptive

# The real trace, when it is beside the project (never copied into it).
trace="$srcdir/../../shared/traces/mooncake_conversation.jsonl"
if [ -r "$trace" ]; then
    expect 0 '' -- --trace "$trace" --requests 300 --time-scale 0.5 \
        --policies gorgo,least-request
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all CLI checks passed"
