%% Shared by the modules of `make bench' (bench/hm_bench*.erl).

%% the bench workload's tables (hm_bench_workload)
-define(TABS, [subscriber, group, server, session]).
-define(GROUPS, 32).
-define(SERVERS, 64).
-define(BITS, 8).
%% the simple workload's one table: `{kv, Key, Value}'
-define(KV, kv).
%% the floor context's table, one per node
-define(FLOOR_TAB, hm_bench_floor_tab).
%% a node is idle once its queues are empty (and its EC copies quiet) for this long
-define(IDLE_STREAK_MS, 300).
%% the EC timelines record the table processes' steps at least this long (slow_step_ms)
-define(SLOW_STEP_MS, 50).
%% the names of the EC contexts in a run's record
-define(EC, [<<"async_ec_pawset">>, <<"async_ec_prwset">>]).
%% how long a call to a node may take
-define(CALL_MS, 120000).
