# Hypermnesia. Every target installs what it needs first (scripts/bootstrap, a no-op when present).
REBAR ?= rebar3
PROPER_NUMTESTS ?= 300
export PROPER_NUMTESTS

.PHONY: all bootstrap compile test test-short test-otp bench-scale eunit ct dialyzer shell examples-build demo demo-crdt demo-partitioned bench-ring bench-access bench-netsplit \
        bench-crdt bench-crdt-sync bench-crdt-tables bench bench-full bench-build sim sim-report faults clean bench-dotted bench-sessions

all: compile

bootstrap:
	@scripts/bootstrap

compile: bootstrap
	$(REBAR) compile

## make test: compile with warnings as errors (profile strict: every exported function has a
## spec), xref (no call to a missing function, no unused local), EUnit (units + PropEr
## properties) with coverage, Common Test, then the coverage of EUnit by module
## (_build/test/cover/index.html).
test: bootstrap
	$(REBAR) as strict compile
	$(REBAR) xref
	$(REBAR) eunit --cover
	$(REBAR) ct
	$(REBAR) cover --verbose

## make test-short: `make test' without coverage and without the real-cluster campaigns that
## take longest and exercise no OTP-release-specific path beyond what the other suites do
## (faults, scale, hosts, upgrade): what CI runs on the newer OTP releases, where `make
## test' on OTP 25 runs them all.
CT_LONG = hm_faults_SUITE hm_scale_SUITE hm_hosts_SUITE hm_upgrade_SUITE
comma := ,
CT_SHORT = $(subst $(eval) ,$(comma),$(strip $(filter-out $(addprefix test/,$(CT_LONG)),$(basename $(wildcard test/*_SUITE.erl)))))
test-short: bootstrap
	$(REBAR) as strict compile
	$(REBAR) xref
	$(REBAR) eunit
	$(REBAR) ct --suite $(CT_SHORT)

## make test-otp OTP=27 (or 29): `make test' on Debian's Erlang/OTP 27 (trixie) or 29 (sid),
## as root, in a chroot that scripts/otp-chroot builds once with debootstrap (a few minutes)
## and keeps under /var/cache/hypermnesia-otp (HM_OTP_CHROOT_DIR). The suite runs on a copy
## of this checkout; the cases that need network namespaces are skipped there.
## OTP_TEST=test-short runs `make test-short' there instead (CI does).
OTP ?= 27
OTP_TEST ?= test
test-otp:
	scripts/otp-chroot $(OTP) make $(OTP_TEST)

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

## The benchmarks are built by rebar3's `bench' profile (rebar.config): the application, and
## bench/, test/ (the peer-cluster harness) and sim/ beside it, in _build/bench/lib.
BENCH_LIB = _build/bench/lib/hypermnesia
BENCH_PA = -pa $(BENCH_LIB)/ebin $(BENCH_LIB)/bench $(BENCH_LIB)/test $(BENCH_LIB)/sim

examples-build: compile
	mkdir -p _build/examples
	erlc +debug_info -o _build/examples examples/hm_demo.erl examples/hm_crdt_demo.erl \
	    examples/hm_partition_demo.erl test/hm_cluster.erl

## make demo: three real nodes, an EC table, a real partition, writes on both sides, heal.
demo: examples-build
	$(EXAMPLES_ERL) -eval 'hm_demo:main(), halt().'

## make bench-ring: partitioned EC tables against Mnesia's fragmented tables and fully
## replicated EC tables, by node count (HM_RING_NODES, default 1,3,5,7; HM_RING_SECONDS per
## point, default 3), the busiest processes, messages per write from the simulator, and client
## latency by replication (tcsb, dotted, dotted with Merkle; HM_RING_KV_NODES, default 5)
## -> bench/results/ring-<date>.md
bench-ring: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'ring_bench:main(["bench/results/ring-'$$(date -u +%Y%m%d-%H%M)'.md"]).'

## make bench-scale: EC tables at the sizes users run, against plain Mnesia in the same run:
## HM_SCALE_ROWS rows (default 1000000) on 3 ram copies, HM_SCALE_WRITERS writers (default 1)
## on node 2, a fourth copy added while they write, node 3 cut off for HM_SCALE_CUT_S seconds
## (default 60), the heal: copy-add time, writer rates, peak memory, time until every copy is
## equal -> bench/results/scale-<date>.md (bench/scale_bench.erl; about 10 minutes)
HM_SCALE_ROWS ?= 1000000
HM_SCALE_CUT_S ?= 60
HM_SCALE_WRITERS ?= 1
SCALE_OUT = bench/results/scale-$$(date -u +%Y%m%d-%H%M).md
bench-scale: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'scale_bench:main(["$(HM_SCALE_ROWS)", "$(HM_SCALE_CUT_S)", "$(HM_SCALE_WRITERS)", "'$(SCALE_OUT)'"]).'

## make bench-access: ns per async_ec read and write on one node, EC and plain tables, against
## async_dirty in the same run -> bench/results/access-<date>.md (about a minute)
bench-access: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell -sname hm_access_bench $(BENCH_PA) -eval 'access_bench:main(["bench/results/access-'$$(date -u +%Y%m%d-%H%M)'.md"]).'

## make demo-partitioned: five real nodes, a table in 8 fragments on a consistent-hash ring
## (3 copies each), writes from a node without most fragments, a partition with hints, a heal,
## a node taken out of the pool and put back under writes.
demo-partitioned: examples-build
	$(EXAMPLES_ERL) -eval 'hm_partition_demo:main(), halt().'

## make demo-crdt: the CRDT library alone, in one process: three replicas of a shopping cart,
## a partition, writes on both sides, heal, in every flavor.
demo-crdt: examples-build
	$(EXAMPLES_ERL) -eval 'hm_crdt_demo:main(), halt().'

## make shell: an Erlang shell with hypermnesia compiled and loaded.
shell: bootstrap
	$(REBAR) shell --apps hypermnesia

## make bench-crdt-sync: lattice propagation of CRDT tables (the runtime's table core)
## against the per-object delta sync hm_crdt_sync, in the simulator: bytes and messages per
## update, convergence under loss and a cut -> bench/results/crdt-sync-<date>.md (about 1 min)
bench-crdt-sync: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'crdt_sync_bench:main(["bench/results/crdt-sync-'$$(date -u +%Y%m%d-%H%M)'.md"]).'

## make bench-crdt-tables: ChiaVe's benchmarks on 3 real nodes (p95 latency against offered
## throughput, bytes per update, convergence of 10,000 adds to one key under background load,
## per flavor) -> bench/results/crdt-<date>.md and the CRDT section of bench/REPORT.md
## (HM_CRDT_RATES, HM_CRDT_SECONDS, HM_CRDT_BG, HM_CRDT_REPS, HM_CRDT_ADDS; a subset, which
## leaves bench/REPORT.md alone: HM_CRDT_FLAVORS, HM_CRDT_LATENCY=0; see the module)
bench-crdt-tables: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'crdt_table_bench:main(["bench/results/crdt-'$$(date -u +%Y%m%d-%H%M)'.md"]).'

## make bench-crdt: microbenchmark of every CRDT type x flavor -> bench/results/crdt.md
bench-crdt: bootstrap
	$(REBAR) as bench compile
	erl -noshell $(BENCH_PA) -eval 'crdt_bench:main(["bench/results/crdt.md"]), halt().'

## make sim SEEDS=N: the deterministic simulator on seeds 1..N, every fault and workload: each
## seed runs EC-table schedules (sim/hm_sim.erl: faults; copies added and removed; full load
## with a partition and saturated links; the same with every partition silent: no nodedown,
## what is sent across waits in the connection's buffers or is dropped when they are full;
## for one seed in five, one copy cut off for most of the run with the log bounded,
## sim/hm_sim_long.erl), one CRDT schedule (sim/hm_sim_crdt.erl: a type x
## flavor), one CRDT-table schedule (sim/hm_sim_crdt_table.erl: copies of a CRDT table of a
## type x flavor on the runtime's table core, with churn), one partitioned-table schedule
## (sim/hm_sim_frag*.erl: fragments on a ring, writes
## from any node, hints, nodes leaving and rejoining the pool, crashes of nodes holding hints,
## in one seed of four a node that dies for good and leaves the pool while down, session
## order of a node's writes) and one DottedDB replica-group
## schedule (sim/hm_sim_dotted.erl: churn, loss, partitions, crashes); prints failures (seed,
## minimised trace), `sim tables: ...', `sim membership: ...', `sim load: ...',
## `sim slow receivers: ...', `sim silent partitions: ...', `sim long partition: ...',
## `sim crdt: ...', `sim crdt-table: ...', `sim frag: ...', `sim frag crdt: ...' (partitioned
## CRDT tables), `sim dotted: ...' and `sim: P passed, F failed'
## Then the sessions family (sim/hm_sim_mrdt.erl: sessions over mergeable types on 3-5
## nodes, partitions, crashes, history collection), its line `sim sessions: P passed, F failed'.
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
## In the same run, a simple workload (one table, 10k keys, 80 % writes of random keys):
## async_dirty, async_ec pawset and prwset and a floor (one ETS insert and one message per
## peer), 2 and 4 generators/node, twice interleaved, 2 s per point; and on both workloads the
## CPU per write, unstable operations at the stop and their drain time, the EC table
## processes' peak memory, space after quiescence. The EC timelines run 3 times (the heal
## target is judged on the median). About 4 to 5 minutes, build included.
## make bench-full: every sweep (generators 1,2,4,8; nodes 1,3,5,7; read share 0..100 %;
## subscribers 1k,10k,100k; ram_copies, disc_copies; 1 s + 4 s per point), a 30 s timeline
## per context with a 10 s cut -> bench/results/full-<date>.* and the bench-full section of
## bench/REPORT.md. About 20 minutes on 2 cores.
## HM_BENCH_SCALE=0.1 make bench-full: every phase and subscriber count scaled (a smoke test,
## a few minutes); scaled runs write to _build/bench/{results,REPORT.md}, not bench/.
## HM_BENCH_SWEEPS=nodes make bench-full: only the sweeps named (comma-separated: gens, nodes,
## read_pct, subs, storage), after the same quick points and timelines.
## Wall time is measured from the start of make (HM_BENCH_T0, ms) and printed in the report.
BENCH_T0 := $(shell date +%s%3N)
BENCH_ERL = HM_BENCH_T0=$(BENCH_T0) erl -noshell $(BENCH_PA)

bench-build: bootstrap
	@scripts/bootstrap gnuplot-nox
	$(REBAR) as bench compile
	mkdir -p bench/results

bench: bench-build
	$(BENCH_ERL) -eval 'hm_bench:main(["quick"]), halt().'

bench-full: bench-build
	$(BENCH_ERL) -eval 'hm_bench:main(["full"]), halt().'

## make bench-tls: what TLS distribution costs per EC write against plain TCP, in one run:
## two clusters of 3 peer nodes on this host, one on each, rounds alternating; CPU per
## async_ec write (3 nodes, until every copy is stable), write rate, sync_ec latency
## -> bench/results/tls-<date>.md (bench/tls_bench.erl; about a minute, build included; needs
## openssl for the certificates)
.PHONY: bench-tls
bench-tls: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'tls_bench:main(["bench/results/tls-'$$(date -u +%Y%m%d-%H%M)'.md"]).'

## make bench-netsplit: the quick partition timeline of async_ec pawset and prwset with a
## clean cut and with a silent one (each node in a network namespace, every packet across
## the cut dropped, the connections up; Linux, as root), 3 rounds interleaved ->
## bench/results/netsplit-<date>.md (about 3 minutes)
bench-netsplit: bench-build
	$(BENCH_ERL) -eval 'hm_bench:netsplit(["bench/results/netsplit-'$$(date -u +%Y%m%d-%H%M)'.md"]), halt().'

## make faults: the real-node fault campaign (test/hm_faults_SUITE.erl: 5 peer nodes, kill -9,
## partitions, heals) for HM_FAULTS_SECONDS per case (default here 180; `make test' runs it for
## 10 s). HM_FAULTS_SEED=S replays a nemesis schedule; HM_FAULTS_PAUSE_MS sets the clients'
## pause between operations (default 20); HM_FAULTS_NETWORK=netns makes every partition
## silent (each node in a network namespace, packets dropped, the connections up; Linux, as
## root). Prints `faults: P passed, F failed (...)' per case.
## Then a partition under full load (hm_ec_SUITE:partition_under_full_load with HM_LOAD=full:
## 3 nodes, 2 unthrottled writers each, node 3 cut off from second 4 to 8, writers stop at
## 14; every copy must converge within 60 s; `make test' runs a shorter one).
HM_FAULTS_SECONDS ?= 180
faults: bootstrap
	HM_FAULTS_SECONDS=$(HM_FAULTS_SECONDS) $(REBAR) ct --suite test/hm_faults_SUITE
	HM_LOAD=full $(REBAR) ct --suite test/hm_ec_SUITE --case partition_under_full_load

## make bench-sessions: sessions over mergeable types (bench/mrdt_bench.erl), 3 peer nodes:
## overhead against plain EC tables by clients (1 to 128; 80 % reads; publish after every
## write, every 10 or every 100 operations), counter throughput under conflicts (publish and
## refresh every 100 operations), log append time by log length (blob log against linked
## log), storage after 32k operations with and without history collection
## -> bench/results/sessions-<yyyymmdd-hhmm>.md and the generated part of the sessions section
## of bench/REPORT.md. About 2 minutes. BENCH_PROFILE=full: 8 client counts, 32k operations,
## key spaces 1024 and 4096.
BENCH_PROFILE ?= quick
SESSIONS_RESULTS = bench/results/sessions-$(shell date +%Y%m%d-%H%M).md
bench-sessions: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	$(BENCH_ERL) -eval 'mrdt_bench:main(["$(BENCH_PROFILE)", "$(SESSIONS_RESULTS)"]), halt().'

clean:
	rm -rf _build

.PHONY: cli status-page-test

## make cli: the command-line tool, an escript -> _build/hmctl (status, members, tables,
## wait-converged; `_build/hmctl' alone prints its usage). See
## docs/guide/05-operations.md.
cli: compile
	scripts/build-hmctl _build/default/lib/hypermnesia/ebin _build/hmctl

## make status-page-test: the HTTP status page in a real browser (Debian's chromium, installed
## here only): 3 peer nodes, a partition and a heal (test/hm_ops_SUITE.erl). `make test' runs
## the rest of that suite and skips this case when chromium is absent.
status-page-test: bootstrap
	@scripts/bootstrap chromium
	$(REBAR) ct --suite test/hm_ops_SUITE --case status_page_in_browser

## make bench-dotted: DottedDB's evaluation shapes (clock entries under churn, strip latency,
## objects under 50 % deletes, anti-entropy bytes and metadata node clock vs Merkle, replication
## latency with loss) on the pure cores and the simulator's network, and the same workloads on
## tagged causal stable broadcast (tcsb: the table simulator), in one VM ->
## bench/results/dotted-<yyyymmdd-hhmm>.md. Under a minute.
bench-dotted: bootstrap
	$(REBAR) as bench compile
	mkdir -p bench/results
	erl -noshell $(BENCH_PA) -eval 'dotted_bench:main(["bench/results"]), halt().'

## make docs: EEP-48 doc chunks into doc/chunks (every compile builds them too), read by
## Erlang's h(hypermnesia), h(hypermnesia, async_ec) and Elixir's h :hypermnesia.async_ec.
.PHONY: docs
docs: bootstrap
	$(REBAR) edoc

## make elixir-example: the Elixir project in examples/elixir (Mix, Hypermnesia as a path
## dependency built by rebar3 through MIX_REBAR3) creates a disc schema after Hypermnesia has
## started, an EC table, writes, deletes and reads, and checks the result and that Elixir's h
## shows the docs. Installs Debian's elixir first (only this target needs it).
ELIXIR_ENV = MIX_HOME=$(CURDIR)/_build/mix MIX_REBAR3=$$(command -v $(REBAR))
.PHONY: elixir-example
elixir-example: bootstrap
	@scripts/bootstrap elixir
	mkdir -p _build
	cd examples/elixir && $(ELIXIR_ENV) mix run -e HmExample.main | tee $(CURDIR)/_build/elixir-example.out
	grep -q '^hm_example: ok' _build/elixir-example.out
	cd examples/elixir && $(ELIXIR_ENV) mix run --no-start \
	    -e 'require IEx.Helpers; IEx.Helpers.h(:hypermnesia.async_ec)' | grep 'async_ec. access context'

## make mnesia-examples: Mnesia's own `company' example (Mnesia User's Guide; Debian's
## erlang-examples, installed here) copied into _build/mnesia-examples, patched by
## scripts/mnesia-examples (mnesia:transaction -> hypermnesia:async_ec per call site, set
## tables created as EC tables), run through the Guide's steps, QLC queries included, next to
## the program as shipped on transaction; fails unless every answer is the same.
MNESIA_EX = _build/mnesia-examples
MNESIA_EX_ERL = erl -noshell -pa _build/default/lib/hypermnesia/ebin $(MNESIA_EX)
.PHONY: mnesia-examples mnesia-examples-build
mnesia-examples-build: compile
	@scripts/bootstrap erlang-examples
	scripts/mnesia-examples
	erlc -o $(MNESIA_EX) examples/mnesia/hm_company_check.erl

mnesia-examples: mnesia-examples-build
	for ctx in transaction async_ec; do \
	    (cd $(MNESIA_EX)/company/$$ctx && erlc company.erl) || exit 1; \
	    $(MNESIA_EX_ERL) $(MNESIA_EX)/company/$$ctx -mnesia dir '"$(MNESIA_EX)/company/$$ctx/db"' \
	        -run hm_company_check main run $(MNESIA_EX)/company/$$ctx.answers || exit 1; \
	done
	$(MNESIA_EX_ERL) -run hm_company_check main compare $(MNESIA_EX)/company/transaction.answers \
	    $(MNESIA_EX)/company/async_ec.answers

## make bench-mnesia: Mnesia's own bench program (lib/mnesia/examples/bench, from Debian's
## erlang-examples) on 3 peer nodes, as shipped (transaction), and patched by
## scripts/mnesia-examples to run every request in async_dirty and under async_ec on EC
## tables; n_fragments 1 with the program's own request routing, then with every request on
## the node that generated it (always_try_nearest_node); then fragmented (12 fragments, the
## program's foreign keys, a copy of each on every node; async_ec on partitioned EC tables
## with hm_ec_access as the access module). Writes bench/results/mnesia-bench-<yyyymmdd-hhmm>.md with the TPS of
## each and the ratios, and whether the copies are equal after the run (about 10 minutes).
MBENCH = $(MNESIA_EX)/bench
MBENCH_ERL = erl -noshell $(BENCH_PA)
MBENCH_OPTS = +nowarn_deprecated_function +nowarn_deprecated_module +nowarn_unused_vars
.PHONY: bench-mnesia
bench-mnesia: mnesia-examples-build
	$(REBAR) as bench compile
	mkdir -p _build/mnesia-bench/results bench/results
	cd $(MBENCH)/transaction && erlc $(MBENCH_OPTS) *.erl
	mkdir -p $(MBENCH)/async_dirty $(MBENCH)/async_ec
	cd $(MBENCH)/patched && erlc $(MBENCH_OPTS) -o ../async_dirty -DBENCH_ACTIVITY=async_dirty \
	    -DBENCH_ACCESS=mnesia_frag -DBENCH_POPULATE=sync_dirty -DBENCH_CREATE=mnesia *.erl
	cd $(MBENCH)/patched && erlc $(MBENCH_OPTS) -o ../async_ec -DBENCH_ACTIVITY=async_dirty \
	    -DBENCH_ACCESS=hm_mnesia_bench_ec -DBENCH_POPULATE=async_dirty \
	    -DBENCH_CREATE=hm_mnesia_bench_ec *.erl
	mkdir -p $(MBENCH)/async_ec_fragmented
	cd $(MBENCH)/patched && erlc $(MBENCH_OPTS) -o ../async_ec_fragmented \
	    -DBENCH_ACTIVITY=async_dirty -DBENCH_ACCESS=hm_ec_access -DBENCH_POPULATE=async_dirty \
	    -DBENCH_CREATE=hm_mnesia_bench_ec *.erl
	for routing in default nearest fragmented; do for ctx in transaction async_dirty async_ec; do \
	    dir=$$ctx; [ $$ctx-$$routing != async_ec-fragmented ] || dir=async_ec_fragmented; \
	    $(MBENCH_ERL) -pa $(MBENCH)/$$dir -run hm_mnesia_bench main run $$ctx $$routing \
	        _build/mnesia-bench/results/$$ctx-$$routing.result || exit 1; \
	done; done
	$(MBENCH_ERL) -run hm_mnesia_bench main report _build/mnesia-bench/results \
	    bench/results/mnesia-bench-$$(date -u +%Y%m%d-%H%M).md

## make bench-partition-memory: what a partition costs in memory (docs/guide/10-production.md): 2 peer
## nodes, one cut off, 100,000 writes of 100-byte records over 10,000 keys on the other; the
## log and metadata after every 20,000, then the time until both logs are empty after the heal.
.PHONY: bench-partition-memory
bench-partition-memory: bootstrap
	$(REBAR) as bench compile
	erl -noshell $(BENCH_PA) -run hm_partition_memory main 100000 10000
