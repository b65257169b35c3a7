# Hypermnesia. Every target installs what it needs first (scripts/bootstrap, a no-op when present).
REBAR ?= rebar3
PROPER_NUMTESTS ?= 300
export PROPER_NUMTESTS

.PHONY: all bootstrap compile test eunit ct dialyzer shell examples-build demo demo-crdt \
        bench-crdt bench bench-full bench-build sim sim-report faults clean bench-sessions

all: compile

bootstrap:
	@scripts/bootstrap

compile: bootstrap
	$(REBAR) compile

## make test: compile with warnings as errors (profile strict: every exported function has a
## spec), then EUnit (units + PropEr properties) and Common Test.
test: bootstrap
	$(REBAR) as strict compile
	$(REBAR) eunit
	$(REBAR) ct

eunit: bootstrap
	$(REBAR) eunit

ct: bootstrap
	$(REBAR) ct

dialyzer: bootstrap
	$(REBAR) dialyzer

## The demos live in examples/, outside the application (they start peer nodes): they are
## compiled here into _build/examples, with the peer-cluster harness they run on, and come
## first in the code path (before any hm_demo.beam left in ebin by a build from when they
## were in src/).
EXAMPLES_ERL = erl -noshell -pa _build/examples _build/default/lib/hypermnesia/ebin

examples-build: compile
	mkdir -p _build/examples
	erlc +debug_info -o _build/examples examples/hm_demo.erl examples/hm_crdt_demo.erl \
	    test/hm_cluster.erl

## make demo: three real nodes, an EC table, a real partition, writes on both sides, heal.
demo: examples-build
	$(EXAMPLES_ERL) -eval 'hm_demo:main(), halt().'

## make demo-crdt: the CRDT library alone, in one process: three replicas of a shopping cart,
## a partition, writes on both sides, heal, in every flavor.
demo-crdt: examples-build
	$(EXAMPLES_ERL) -eval 'hm_crdt_demo:main(), halt().'

## make shell: an Erlang shell with hypermnesia compiled and loaded.
shell: bootstrap
	$(REBAR) shell --apps hypermnesia

## make bench-crdt: microbenchmark of every CRDT type x flavor -> bench/results/crdt.md
bench-crdt: compile
	mkdir -p _build/bench
	erlc -o _build/bench bench/crdt_bench.erl
	erl -noshell -pa _build/default/lib/hypermnesia/ebin _build/bench \
	    -eval 'crdt_bench:main(["bench/results/crdt.md"]), halt().'

## make sim SEEDS=N: the deterministic simulator on seeds 1..N, every fault and workload: each
## seed runs EC-table schedules (sim/hm_sim.erl: faults; copies added and removed; full load
## with a partition and saturated links) and one CRDT schedule (sim/hm_sim_crdt.erl: a type x
## flavor); prints failures (seed, minimised trace), `sim tables: ...', `sim membership: ...',
## `sim load: ...', `sim crdt: ...' and `sim: P passed, F failed'; then the sessions family
## (sim/hm_sim_mrdt.erl: sessions over mergeable types on 3-5 nodes, partitions, crashes,
## history collection), its line `sim sessions: P passed, F failed (...)'.
## make sim SEED=S [TRACE=file]: replay one seed, both schedules (or a minimised trace of
## either kind written by a failure).
## make sim-report: the scale table (10/50/100/200 replicas) into sim/REPORT.md.
SEEDS ?= 300
SIM_ERL = erl -noshell -pa _build/test/lib/hypermnesia/ebin _build/test/lib/hypermnesia/sim \
          _build/test/lib/hypermnesia/test
sim: bootstrap
	$(REBAR) as test compile
ifdef SEED
	$(SIM_ERL) -eval 'hm_sim:main(["seed", "$(SEED)" $(if $(TRACE),$(comma) "$(TRACE)")]).'
else
	$(SIM_ERL) -eval 'hm_sim:main(["seeds", "$(SEEDS)"]).'
	$(SIM_ERL) -eval 'halt(case hm_sim_mrdt:main(["seeds", "$(SEEDS)"]) of ok -> 0; _ -> 1 end).'
endif

sim-report: bootstrap
	$(REBAR) as test compile
	$(SIM_ERL) -eval 'hm_sim:main(["report", "sim/REPORT.md"]).'

comma := ,

## make bench: Mnesia's bench workload (t1..t5) under transaction, sync_dirty, async_dirty and
## async_ec (pawset, prwset), 3 nodes, 2 generators/node (and 4 for async_dirty and EC), 10k
## subscribers, 0.5 s warm-up + 3 s measured per point, a 12 s partition timeline (node 3 cut
## off from second 4 to 8) -> bench/results/quick-<date>.{json,md,png} and the generated
## section of bench/REPORT.md (figures of this run; the rest of the file is hand-written).
## Under 3 minutes, build included.
## make bench-full: every sweep (generators 1,2,4,8; nodes 1,3,5,7; read share 0..100 %;
## subscribers 1k,10k,100k; ram_copies, disc_copies; 1 s + 4 s per point), a 30 s timeline
## per context with a 10 s cut -> bench/results/full-<date>.* and the bench-full section of
## bench/REPORT.md. About 20 minutes on 2 cores.
## HM_BENCH_SCALE=0.1 make bench-full: every phase and subscriber count scaled (a smoke test,
## a few minutes); scaled runs write to _build/bench/{results,REPORT.md}, not bench/.
## Wall time is measured from the start of make (HM_BENCH_T0, ms) and printed in the report.
BENCH_T0 := $(shell date +%s%3N)
BENCH_ERL = HM_BENCH_T0=$(BENCH_T0) erl -noshell -pa _build/default/lib/hypermnesia/ebin _build/bench

bench-build: compile
	@scripts/bootstrap gnuplot-nox
	mkdir -p _build/bench bench/results
	erlc +debug_info -o _build/bench bench/hm_bench.erl test/hm_cluster.erl

bench: bench-build
	$(BENCH_ERL) -eval 'hm_bench:main(["quick"]), halt().'

bench-full: bench-build
	$(BENCH_ERL) -eval 'hm_bench:main(["full"]), halt().'

## make faults: the real-node fault campaign (test/hm_faults_SUITE.erl: 5 peer nodes, kill -9,
## partitions, heals) for HM_FAULTS_SECONDS per case (default here 180; `make test' runs it for
## 10 s). HM_FAULTS_SEED=S replays a nemesis schedule; HM_FAULTS_PAUSE_MS sets the clients'
## pause between operations (default 20). Prints `faults: P passed, F failed (...)' per case.
## Then a partition under full load (hm_ec_SUITE:partition_under_full_load with HM_LOAD=full:
## 3 nodes, 2 unthrottled writers each, node 3 cut off from second 4 to 8, writers stop at
## 14; every copy must converge within 60 s; `make test' runs a shorter one).
HM_FAULTS_SECONDS ?= 180
faults: bootstrap
	HM_FAULTS_SECONDS=$(HM_FAULTS_SECONDS) $(REBAR) ct --suite test/hm_faults_SUITE
	HM_LOAD=full $(REBAR) ct --suite test/hm_ec_SUITE --case partition_under_full_load

## make bench-sessions: sessions over mergeable types against plain EC tables
## (bench/mrdt_bench.erl): 3 nodes, 1 to 128 clients, 80 % reads, every write published;
## repository size after collection; log append time, blob log against linked log
## -> bench/results/sessions-<date>.md. BENCH_PROFILE=full for 8 client counts and 32k
## operations.
BENCH_PROFILE ?= quick
SESSIONS_RESULTS = bench/results/sessions-$(shell date +%Y%m%d-%H%M).md
bench-sessions: compile
	mkdir -p _build/bench bench/results
	erlc +debug_info -pa _build/default/lib/hypermnesia/ebin -o _build/bench \
	    bench/mrdt_bench.erl test/hm_cluster.erl
	$(BENCH_ERL) -eval 'mrdt_bench:main(["$(BENCH_PROFILE)", "$(SESSIONS_RESULTS)"]), halt().'

clean:
	rm -rf _build
