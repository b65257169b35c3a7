%% @doc One point of `make bench' (populate, warm-up, measure, cool-down for one context),
%% one partition timeline, the EC cost diagnostics, and the summaries of their results.
-module(hm_bench_run).

-export([workload/1, ec_step_profile/2, ec_costs/1, ec_diagnostics/3, point/3,
         rel_before/2, timeline_runs/2, speed/2]).

-import(hm_bench_lib, [ids/1, call/5, pcall/4, wait_whole/1, wait_until/2, sleep_until/1,
                       merge_add/2, sub/3, ctx_name/1, with_cluster/2, now_ms_sys/0, clock/0,
                       now_ms/0, worst/1]).

-include("hm_bench.hrl").

%%% ============================================================= one point

%% @doc populate, warm-up, measure, cool-down for one context. Besides the generators, every node
%% runs an idle watcher (node_start/1): from the start of the load until the node is idle
%% again it measures the VM's CPU time, and it follows the EC copies' unstable operations
%% from the moment the generators stop until there are none.
-spec point(hm_bench_lib:cluster(), map(), hm_bench_workload:context()) -> map().
point(C, P, Ctx) ->
    io:format("~s == ~s~s: ~p~n", [clock(), ctx_name(Ctx),
                                   case workload(P) of bench -> ""; W -> [" (", atom_to_list(W), ")"] end,
                                   maps:with([nodes, gens, subs, read_pct, storage], P)]),
    T0 = now_ms(),
    Tabs = tabs(P, Ctx),
    setup_tables(C, P, Ctx),
    SetupMs = now_ms() - T0,
    Warm = maps:get(warm_ms, P), Meas = maps:get(measure_ms, P),
    Before = pcall(C, hm_bench_node, node_stats, []),
    _ = pcall(C, hm_bench_probe, node_sample_start, []),
    %% the watcher gives up when the node is not idle within both cool-down waits
    IdleMax = conv_wait(P, Ctx, conv_ms) + maps:get(conv_ms, P),
    _ = pcall(C, hm_bench_probe, node_where_start, []),
    Spec = start_load(C, P#{idle_max_ms => IdleMax}, Ctx, Warm, Meas),
    StopAt = maps:get(stop_at, Spec),
    sleep_until(StopAt),
    _ = pcall(C, hm_bench_node, node_gens_done, [Warm + Meas + 60000]),
    %% cool-down: convergence of every replica's content, then quiescence of EC metadata
    %% dirty contexts have no conflict resolution: replicas may stay different for good, so
    %% they get a shorter wait; `distinct_replicas' says how many contents remained. The
    %% floor's tables are compared but not waited for: nothing resolves its conflicts.
    ConvMs = case Ctx of
                 floor -> null;
                 _ -> case wait_converged(C, Tabs, conv_wait(P, Ctx, conv_ms)) of
                          ok -> max(0, now_ms_sys() - StopAt);
                          timeout -> null
                      end
             end,
    Distinct = length(lists:usort(pcall(C, hm_bench_node, node_hash, [Tabs]))),
    Quiet = case Ctx of
                {async_ec, _} ->
                    case wait_until(fun() -> lists:all(fun(Q) -> Q =:= true end,
                                                       pcall(C, hm_bench_node, node_ec_quiet,
                                                             [Tabs]))
                                    end, maps:get(conv_ms, P)) of
                        ok -> max(0, now_ms_sys() - StopAt);
                        timeout -> null
                    end;
                _ -> 0
            end,
    %% the generators' summaries are made once the node is idle (outside the CPU measured)
    Results = pcall(C, hm_bench_node, node_collect, [IdleMax + 60000]),
    Idle = pcall(C, hm_bench_node, node_idle_result, [IdleMax + 60000]),
    Where = pcall(C, hm_bench_probe, node_where_stop, []),
    Samples = pcall(C, hm_bench_probe, node_sample_stop, []),
    After = pcall(C, hm_bench_node, node_stats, []),
    Mem = case Ctx of
              floor -> [];
              _ -> pcall(C, hm_bench_node, node_memory, [Tabs])
          end,
    delete_tables(C, P, Ctx),
    (summarize(Ctx, P, Results, Meas, ConvMs, Quiet, Mem, Samples, Before, After))#{
      distinct_replicas => Distinct, setup_ms => SetupMs, point_wall_ms => now_ms() - T0,
      workload => workload(P), cpu => cpu_summary(Results, Idle), where => where(Where)}.

%% @doc A point's workload: Mnesia's bench tables (`bench') or the one `kv' table.
-spec workload(map()) -> bench | simple.
workload(P) -> maps:get(workload, P, bench).

%% the tables a point of this workload and context uses
tabs(_, floor) -> [?FLOOR_TAB];
tabs(P, _) -> case workload(P) of simple -> [?KV]; bench -> ?TABS end.

%% CPU per write and the stability backlog, from the nodes' generators and idle watchers.
%% CPU: erlang:statistics(runtime) of every VM (all its schedulers), from the start of the
%% load (warm-up included) until the node is idle again, summed over the nodes; divided by
%% the records written in that time (warm-up included), summed over the nodes.
cpu_summary(Results, Idle) ->
    Writes = lists:sum([maps:get(writes_all, R, 0) || R <- Results]),
    Ok = [I || I = #{idle_reached := _} <- Idle],
    CpuMs = lists:sum([maps:get(cpu_ms, I) || I <- Ok]),
    Reached = length(Ok) =:= length(Idle) andalso
        lists:all(fun(#{idle_reached := B}) -> B end, Ok),
    Drain = [maps:get(unstable_drain_ms, I) || I <- Ok],
    #{writes => Writes, ops => lists:sum([maps:get(ops_all, R, 0) || R <- Results]),
      cpu_ms => CpuMs, cpu_ms_per_node => [maps:get(cpu_ms, I, null) || I <- Idle],
      cpu_load_ms => lists:sum([maps:get(cpu_load_ms, I, 0) || I <- Ok]),
      %% the wall time of the cool-down's hash polls inside the CPU counted (an upper bound of
      %% their share of it)
      hash_poll_ms => lists:sum([maps:get(hash_poll_ms, I, 0) || I <- Ok]),
      cpu_us_per_write => case Writes of 0 -> null; _ -> 1000 * CpuMs / Writes end,
      idle_reached => Reached,
      idle_ms_after_stop => case Reached of
                                true -> lists:max([0 | [maps:get(idle_ms, I) || I <- Ok]]);
                                false -> null
                            end,
      unstable_at_stop => lists:sum([maps:get(unstable_at_stop, I, 0) || I <- Ok]),
      unstable_at_stop_per_node => [maps:get(unstable_at_stop, I, null) || I <- Idle],
      %% each node's watcher result as it came (last_busy: what kept it busy last)
      per_node => Idle,
      unstable_drain_ms => case lists:member(null, Drain) orelse Ok =:= [] of
                               true -> null;
                               false -> lists:max(Drain)
                           end}.

%% where the CPU went, summed over the nodes (node_where_stop/0): from just before the load
%% to the end of the cool-down
where(PerNode) ->
    #{msacc_us => lists:foldl(fun(#{msacc_us := M}, A) -> merge_add(M, A) end, #{}, PerNode),
      reductions => lists:foldl(fun(#{reductions := R}, A) -> merge_add(R, A) end, #{},
                                PerNode)}.

%% how long the cool-down waits for equal replicas: EC converges by design; plain Mnesia's
%% dirty contexts may never do so (conflicting writes stay applied in different orders)
conv_wait(P, {async_ec, _}, K) -> maps:get(K, P);
conv_wait(P, _, _) -> maps:get(dirty_conv_ms, P).

%% start the generators on every node, `Warm' ms of warm-up then `Meas' ms measured; the spec
start_load(C, P, Ctx, Warm, Meas) ->
    StartAt = erlang:system_time(millisecond) + 300,
    Spec = #{ctx => Ctx, gens => maps:get(gens, P), subs => maps:get(subs, P),
             read_pct => maps:get(read_pct, P), start_at => StartAt, warm_ms => Warm,
             measure_ms => Meas, stop_at => StartAt + Warm + Meas,
             workload => workload(P), nodes => maps:get(nodes, C),
             %% the idle watcher, only where the cool-down does not depend on collecting
             %% the generators' results at once (the points, not the timeline)
             idle_max_ms => maps:get(idle_max_ms, P, none), tabs => tabs(P, Ctx)},
    _ = pcall(C, hm_bench_node, node_start, [Spec]),
    Spec.

setup_tables(C, P, floor) ->
    %% every node populates its own floor table with the same records
    _ = [ok = R || R <- pcall(C, hm_bench_node, node_floor_start, [maps:get(subs, P)])],
    ok;
setup_tables(C, P, Ctx) ->
    Nodes = maps:get(nodes, C),
    Storage = maps:get(storage, P, maps:get(storage, C)),
    Tabs = tabs(P, Ctx),
    ok = call(C, 1, hm_bench_node, node_create, [Ctx, {Storage, Nodes}, workload(P)]),
    _ = pcall(C, mnesia, wait_for_tables, [Tabs, 30000]),
    case Ctx of
        {async_ec, _} ->
            ok = wait_until(fun() ->
                                    lists:all(fun(I) -> ec_ready(C, I, Tabs) end, ids(C))
                            end, 30000);
        _ -> ok
    end,
    ok = call(C, 1, hm_bench_node, node_populate, [Ctx, maps:get(subs, P), workload(P)]),
    ok = wait_converged(C, Tabs, 60000).

ec_ready(C, I, Tabs) ->
    lists:all(fun(T) -> case call(C, I, hypermnesia, info, [T]) of
                            #{status := ready} -> true;
                            _ -> false
                        end
              end, Tabs).

delete_tables(C) -> delete_tables(C, #{}, none).

delete_tables(C, _, floor) ->
    _ = pcall(C, hm_bench_node, node_floor_stop, []),
    ok;
delete_tables(C, P, Ctx) ->
    [_ = call(C, 1, hm_bench_node, node_delete, [T]) || T <- tabs(P, Ctx)],
    ok.

wait_converged(C, Ms) -> wait_converged(C, ?TABS, Ms).

wait_converged(C, Tabs, Ms) ->
    wait_until(fun() -> length(lists:usort(pcall(C, hm_bench_node, node_hash, [Tabs]))) =:= 1 end,
               Ms).

%%% ============================================================= partition timeline

timeline(C, P, Ctx) ->
    Tot = maps:get(timeline_s, P),
    From = Tot div 3, To = 2 * Tot div 3,
    case length(maps:get(nodes, C)) < 2 of
        true -> #{context => ctx_name(Ctx), skipped => <<"one node">>};
        false -> timeline(C, P, Ctx, Tot, From, To)
    end.

timeline(C, P, Ctx, Tot, From, To) ->
    io:format("~s == timeline ~s: ~p s, partition ~p..~p s~n", [clock(), ctx_name(Ctx), Tot, From, To]),
    %% the EC tables' processes keep their slow steps (read when they start), for the
    %% record of the heal
    IsEc = case Ctx of {async_ec, _} -> true; _ -> false end,
    _ = [call(C, I, application, set_env, [hypermnesia, slow_step_ms, ?SLOW_STEP_MS])
         || IsEc, I <- ids(C)],
    setup_tables(C, P, Ctx),
    _ = pcall(C, hm_bench_probe, node_sample_start, []),
    #{start_at := StartAt, stop_at := StopAt} = start_load(C, P, Ctx, 0, Tot * 1000),
    N = length(maps:get(nodes, C)),
    Side1 = lists:seq(1, N - 1), Side2 = [N],
    sleep_until(StartAt + From * 1000),
    ok = hm_cluster:cut(maps:get(cluster, C), Side1, Side2),
    sleep_until(StartAt + To * 1000),
    %% cookies restored, nothing else: the reconnection is part of what is measured
    ok = hm_cluster:heal(maps:get(cluster, C), #{wait => false}),
    HealAt = now_ms_sys(),
    Results = pcall(C, hm_bench_node, node_collect, [Tot * 1000 + 60000]),
    Samples = pcall(C, hm_bench_probe, node_sample_stop, [StartAt]),
    PerNodeSampled = fun(Key) -> [[maps:get(S, maps:get(Key, Sm, #{}), 0)
                                   || S <- lists:seq(0, Tot - 1)] || Sm <- Samples]
                     end,
    Whole = wait_whole(C),
    Conv = wait_converged(C, conv_wait(P, Ctx, heal_conv_ms)),
    ConvAt = now_ms_sys(),
    {ConvAfterHeal, ConvAfterStop} = case Conv of
                                         ok -> {ConvAt - HealAt, max(0, ConvAt - StopAt)};
                                         timeout -> {null, null}
                                     end,
    Steps = case IsEc of
                true -> heal_steps(C, HealAt);
                false -> []
            end,
    PerSec = [lists:sum([maps:get(S, maps:get(per_sec, R), 0) || R <- Results])
              || S <- lists:seq(0, Tot - 1)],
    PerNode = [[maps:get(S, maps:get(per_sec, R), 0) || S <- lists:seq(0, Tot - 1)]
               || R <- Results],
    Errs = lists:sum([maps:get(errors, R) || R <- Results]),
    #{context => ctx_name(Ctx), per_sec => PerSec, per_node_per_sec => PerNode,
      ec_server_queue_max_per_node_per_sec => PerNodeSampled(queue_max_per_sec),
      ec_remote_queued_max_per_node_per_sec => PerNodeSampled(remote_queued_max_per_sec),
      partition_s => [From, To], errors => Errs, heal_steps => Steps, rejoined => Whole,
      converged_ms_after_heal => ConvAfterHeal, converged_ms_after_stop => ConvAfterStop,
      before_ops_s => hm_bench_stats:mean(sub(PerSec, 2, From - 1)),
      during_ops_s => hm_bench_stats:mean(sub(PerSec, From + 2, To - From - 2)),
      after_ops_s => hm_bench_stats:mean(sub(PerSec, To + 3, Tot - To - 3))}.

%% The steps of ?SLOW_STEP_MS or more of the EC table processes (`slow_steps' of
%% hypermnesia:info/1, the newest 64 per table and node) that started from half a second
%% before the heal on, oldest first: `at_ms' counts from the heal.
heal_steps(C, HealAt) ->
    lists:sort(fun(#{at_ms := A}, #{at_ms := B}) -> A =< B end,
               [#{node => I, at_ms => At - HealAt, table => atom_to_binary(Tab),
                  kind => atom_to_binary(Kind), ms => Ms, reductions => Reds}
                || I <- ids(C), Tab <- ?TABS,
                   #{slow_steps := L} <- [call(C, I, hypermnesia, info, [Tab])],
                   {Kind, At, Ms, Reds} <- L, At >= HealAt - 500]).

%% @doc The timeline of a context, each on a fresh cluster; an EC context's `heal_runs' times,
%% the first one's figures with `heal_runs': per run, the rate after the heal against
%% before the cut and the convergence after the generators stopped.
-spec timeline_runs(map(), hm_bench_workload:context()) -> map().
timeline_runs(P, Ctx) ->
    Run = fun() -> with_cluster(P, fun(C1) -> timeline(C1, P, Ctx) end) end,
    First = Run(),
    case Ctx of
        {async_ec, _} ->
            More = [Run() || _ <- lists:seq(2, maps:get(heal_runs, P, 1))],
            First#{heal_runs => [heal_run(T) || T <- [First | More]]};
        _ -> First
    end.

heal_run(T) ->
    #{after_over_before => rel_before(T, after_ops_s),
      converged_ms_after_stop => maps:get(converged_ms_after_stop, T, null)}.

%% @doc A timeline's figure `K' (ops/s) against its rate before the cut, or null.
-spec rel_before(map(), atom()) -> float() | null.
rel_before(#{before_ops_s := B} = T, K) when is_number(B), B > 0 ->
    case maps:get(K, T, null) of
        X when is_number(X) -> X / B;
        _ -> null
    end;
rel_before(_, _) -> null.

%%% ============================================================= EC cost breakdown

%% @doc One EC load window (pawset, the quick point's generators, `diag_ms'), traced on node 2:
%% how many `op' messages its server receives per remote operation it delivers (1.0 means
%% no retransmission); with `Eprof', also eprof of node 1's server for 1.5 s of it.
-spec ec_diagnostics(hm_bench_lib:cluster(), map(), boolean()) -> map().
ec_diagnostics(C, P, Eprof) ->
    io:format("~s == EC diagnostics: amplification (trace, node 2)~s~n",
              [clock(), case Eprof of true -> ", eprof (node 1)"; false -> "" end]),
    Ctx = {async_ec, pawset},
    setup_tables(C, P, Ctx),
    I = min(2, length(maps:get(nodes, C))),
    D0 = call(C, I, hm_bench_probe, node_remote_delivered, [?TABS]),
    ok = call(C, I, hm_bench_probe, node_trace_start, []),
    #{start_at := StartAt} = start_load(C, P, Ctx, 0, maps:get(diag_ms, P)),
    Top = case Eprof of
              true -> sleep_until(StartAt + 300),
                      hm_check:outcome(fun() -> call(C, 1, hm_bench_probe, node_eprof,
                                            [min(1500, maps:get(diag_ms, P))])
                              end);
              false -> []
          end,
    _ = pcall(C, hm_bench_node, node_collect, [60000]),
    Quiet = wait_until(fun() -> lists:all(fun(Q) -> Q =:= true end,
                                          pcall(C, hm_bench_node, node_ec_quiet, [?TABS]))
                       end, 30000),
    Counts = call(C, I, hm_bench_probe, node_trace_stop, []),
    D1 = call(C, I, hm_bench_probe, node_remote_delivered, [?TABS]),
    delete_tables(C),
    Ops = maps:get(op, Counts, 0),
    #{amplification => #{node => I, received_by_kind => Counts,
                         remote_ops_delivered => D1 - D0,
                         op_messages_per_remote_op => case D1 - D0 of 0 -> null; D -> Ops / D end,
                         quiet => Quiet},
      eprof => case Top of
                   L when is_list(L) -> L;
                   _ -> [list_to_binary(io_lib:format("~0p", [Top]))]
               end}.

%% @doc The EC table processes' work by step, on the simple workload (pawset, the quick point's
%% generators, one `diag_ms' window): the tables' step totals (`slow_step_ms' on, with a
%% limit no step reaches) and their processes' reductions, per node, with the operations
%% each copy applied (its own and the others').
-spec ec_step_profile(hm_bench_lib:cluster(), map()) -> map().
ec_step_profile(C, P) ->
    io:format("~s == EC table processes' steps (simple workload, pawset)~n", [clock()]),
    S = maps:get(simple, P),
    Q = P#{workload => simple, subs := maps:get(keys, S), read_pct := 100 - maps:get(write_pct, S)},
    Ctx = {async_ec, pawset},
    _ = pcall(C, application, set_env, [hypermnesia, slow_step_ms, 3600000]),
    try
        setup_tables(C, Q, Ctx),
        R0 = pcall(C, hm_bench_node, node_table_reductions, []),
        #{stop_at := StopAt} = start_load(C, Q, Ctx, 0, maps:get(diag_ms, P)),
        sleep_until(StopAt),
        _ = pcall(C, hm_bench_node, node_collect, [60000]),
        Quiet = wait_until(fun() -> lists:all(fun(X) -> X =:= true end,
                                              pcall(C, hm_bench_node, node_ec_quiet, [[?KV]]))
                           end, 30000),
        R1 = pcall(C, hm_bench_node, node_table_reductions, []),
        Steps = pcall(C, hm_bench_node, node_step_totals, [?KV]),
        delete_tables(C, Q, Ctx),
        #{quiet => Quiet,
          per_node => [X#{process_reductions => B - A}
                       || {X, A, B} <- lists:zip3(Steps, R0, R1), is_map(X)]}
    after
        _ = pcall(C, application, unset_env, [hypermnesia, slow_step_ms])
    end.

%% @doc The cost of each step of one EC write, measured on node 1 (hm_bench_probe).
-spec ec_costs(hm_bench_lib:cluster()) -> map().
ec_costs(C) ->
    io:format("== EC write cost breakdown on node 1~n"),
    P = #{subs => 2000, storage => maps:get(storage, C)},
    setup_tables(C, P, {async_ec, pawset}),
    Costs = call(C, 1, hm_bench_probe, node_costs, [3000]),
    delete_tables(C),
    Costs.

%%% ============================================================= summary

summarize(Ctx, P, Results, MeasMs, ConvMs, QuietMs, Mem, Samples, Before, After) ->
    Ops = lists:sum([maps:get(ops, R, 0) || R <- Results]),
    Lat = merge_lat([maps:get(lat, R, #{n => 0}) || R <- Results]),
    Words = fun(K) -> [lists:sum([maps:get(K, V) || V <- maps:values(M)]) || M <- Mem] end,
    TabW = Words(table_words), HelpW = Words(helper_words), PlainW = Words(plain_set_words),
    Overhead = [(T + H) / Pl - 1 || {T, H, Pl} <- lists:zip3(TabW, HelpW, PlainW), Pl > 0],
    Delta = fun(K) -> [maps:get(K, A) - maps:get(K, B) || {A, B} <- lists:zip(After, Before)] end,
    SrvRed = Delta(ec_server_reductions), Red = Delta(reductions),
    #{context => ctx_name(Ctx), nodes => length(Results), gens_per_node => maps:get(gens, P),
      subs => maps:get(subs, P), read_pct => maps:get(read_pct, P),
      storage => maps:get(storage, P),
      throughput_ops_s => Ops / (MeasMs / 1000), ops => Ops, latency => Lat,
      errors => lists:sum([maps:get(errors, R, 0) || R <- Results]),
      error_samples => [list_to_binary(io_lib:format("~0P", [E, 12]))
                        || R <- Results, E <- maps:get(error_samples, R, [])],
      misses => lists:sum([maps:get(misses, R, 0) || R <- Results]),
      retries => lists:sum([maps:get(restarts, R, 0) || R <- Results]),
      by_type => lists:foldl(fun(R, A) -> merge_add(maps:get(by_type, R, #{}), A) end, #{},
                             Results),
      per_node_ops => [maps:get(ops, R, 0) || R <- Results],
      convergence_ms => ConvMs, quiescence_ms => QuietMs,
      memory_words => #{table => TabW, helpers => HelpW, plain_set => PlainW},
      state_catch_ups => lists:sum(Words(state_catch_ups)),
      %% per node, the keys holding a metadata row after the cool-down, and the keys
      meta_keys => Words(meta_keys), keys => Words(keys),
      space_overhead => hm_bench_stats:mean(Overhead),
      %% the same as a ratio: (table + its metadata and log) / a plain set of the same
      %% records, the mean over the nodes, and the largest node's
      space_ratio => case hm_bench_stats:mean(Overhead) of null -> null; O -> 1 + O end,
      space_ratio_max_node => case Overhead of [] -> null; _ -> 1 + lists:max(Overhead) end,
      %% the peak over the point of the EC table processes' memory, largest node
      table_procs_memory_peak_bytes =>
          lists:max([0 | [maps:get(table_procs_memory_max_bytes, S, 0) || S <- Samples]]),
      table_proc_memory_peak_bytes =>
          lists:max([0 | [maps:get(table_proc_memory_max_bytes, S, 0) || S <- Samples]]),
      ec_server_queue => [maps:without([queue_max_per_sec, remote_queued_max_per_sec], S) || S <- Samples],
      ec_server_reduction_share => [case R of 0 -> 0; _ -> S / R end
                                    || {S, R} <- lists:zip(SrvRed, Red)],
      runtime_ms => Delta(runtime_ms)}.

%% @doc The issue's speed figures from a run's points, per workload, EC context and generators per
%% node: EC / async_dirty throughput (the simple workload: the mean over its rounds of each),
%% CPU per write of EC, async_dirty and the floor (over the rounds: total CPU / total writes)
%% and their ratios, the unstable operations when the generators stopped and the time they
%% took to drain, the peak memory of the EC table processes and the space ratio after
%% quiescence (the worst round).
-spec speed([map()], [map()]) -> [map()].
speed(Points, Simple) ->
    Bench = [X || X = #{nodes := 3} <- Points],
    Gs = fun(Pts) -> lists:usort([G || #{context := N, gens_per_node := G} <- Pts,
                                       lists:member(N, ?EC)]) end,
    [speed_row(W, E, G, Pts, Simple)
     || {W, Pts} <- [{bench, Bench}, {simple, Simple}], G <- Gs(Pts), E <- ?EC,
        sel(Pts, E, G) =/= []].

speed_row(W, E, G, Pts, Simple) ->
    Ec = sel(Pts, E, G), Dirty = sel(Pts, <<"async_dirty">>, G),
    Floor = sel(Simple, <<"floor">>, G),
    Ratio = fun(A, B) when is_number(A), is_number(B), B > 0 -> A / B; (_, _) -> null end,
    Tp = fun(L) -> hm_bench_stats:mean([T || #{throughput_ops_s := T} <- L]) end,
    CpuW = fun(L) -> cpu_per_write(L) end,
    Worst = fun(K, L) -> worst([maps:get(K, X, null) || X <- L]) end,
    WorstCpu = fun(K, L) -> worst([maps:get(K, maps:get(cpu, X, #{}), null) || X <- L]) end,
    #{workload => W, context => E, gens_per_node => G, rounds => length(Ec),
      throughput_ops_s => Tp(Ec), dirty_throughput_ops_s => Tp(Dirty),
      ec_vs_dirty_throughput => Ratio(Tp(Ec), Tp(Dirty)),
      %% round by round (EC against the async_dirty point just before it): the spread
      ec_vs_dirty_throughput_by_round =>
          [Ratio(Tp([X]), Tp([Y])) || X = #{round := R} <- Ec, Y = #{round := R1} <- Dirty,
                                      R =:= R1],
      cpu_us_per_write => CpuW(Ec), dirty_cpu_us_per_write => CpuW(Dirty),
      floor_cpu_us_per_write => CpuW(Floor),
      ec_vs_dirty_cpu => Ratio(CpuW(Ec), CpuW(Dirty)),
      ec_vs_floor_cpu => Ratio(CpuW(Ec), CpuW(Floor)),
      idle_reached => lists:all(fun(X) -> maps:get(idle_reached, maps:get(cpu, X, #{}), false) end,
                                Ec ++ Dirty ++ Floor),
      %% the largest share of a point's CPU the cool-down's hash polls could have taken
      hash_poll_share_max => worst([case maps:get(cpu, X, #{}) of
                                        #{cpu_ms := Cpu, hash_poll_ms := H} when Cpu > 0 -> H / Cpu;
                                        _ -> null
                                    end || X <- Ec ++ Dirty ++ Floor]),
      unstable_at_stop => WorstCpu(unstable_at_stop, Ec),
      unstable_drain_ms => WorstCpu(unstable_drain_ms, Ec),
      state_catch_ups => lists:sum([maps:get(state_catch_ups, X, 0) || X <- Ec]),
      table_procs_memory_peak_bytes => Worst(table_procs_memory_peak_bytes, Ec),
      table_proc_memory_peak_bytes => Worst(table_proc_memory_peak_bytes, Ec),
      space_ratio => Worst(space_ratio, Ec), space_ratio_max_node => Worst(space_ratio_max_node, Ec)}.

sel(Pts, Name, G) -> [X || X = #{context := N, gens_per_node := G1} <- Pts, N =:= Name, G1 =:= G].

cpu_per_write(L) ->
    Cpu = lists:sum([maps:get(cpu_ms, maps:get(cpu, X, #{}), 0) || X <- L]),
    Writes = lists:sum([maps:get(writes, maps:get(cpu, X, #{}), 0) || X <- L]),
    case Writes of 0 -> null; _ -> 1000 * Cpu / Writes end.

%% weighted merge of per-node latency summaries (percentiles: weighted mean of the nodes')
merge_lat(Ls0) ->
    Ls = [L || L = #{n := N} <- Ls0, N > 0],
    N = lists:sum([maps:get(n, L) || L <- Ls]),
    case N of
        0 -> #{n => 0};
        _ ->
            W = fun(K) -> lists:sum([maps:get(K, L) * maps:get(n, L) || L <- Ls]) / N end,
            #{n => N, mean_us => W(mean_us), p50_us => W(p50_us), p95_us => W(p95_us),
              p99_us => W(p99_us), max_us => lists:max([maps:get(max_us, L) || L <- Ls])}
    end.
