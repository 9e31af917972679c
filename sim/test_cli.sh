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

expect 2 "unknown option '--bogus'" -- --bogus
expect 2 "--requests: expected a whole number, got 'abc'" -- --requests abc
expect 2 "--requests: 0 is out of range" -- --requests 0
expect 2 "--rate: expected a positive number" -- --rate -3
expect 2 "--time-scale: expected a positive number" -- --time-scale=nan
expect 2 "--seed needs a value" -- --seed
expect 2 "unknown class \"foo\"" -- --cluster 4xfoo
expect 2 "unknown workload 'nope'" -- --workload nope
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
for k in policy ttft_mean_s ttft_p50_s ttft_p95_s ttft_p99_s e2e_p50_s \
    e2e_p95_s cache_hit_rate load_cv slo_attainment route_ns_p50 runs; do
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
