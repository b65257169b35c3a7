%% @doc What `make bench' runs on each peer node: creating and populating the tables, the
%% request generators, the idle watcher (CPU time until the node is idle again, unstable
%% operations after the stop), and the node's memory, content hash and counters.
-module(hm_bench_node).

%% run on the peer nodes
-export([node_create/3, node_delete/1, node_populate/3, node_floor_start/1, node_floor_stop/0,
         node_start/1, node_gens_done/1, node_idle_result/1, node_collect/1, node_memory/1,
         node_hash/1, node_ec_quiet/1, node_table_reductions/0, node_step_totals/1, node_stats/0]).
%% for the other bench modules
-export([unregister_if/1, table_pids/0, ec_pids/0]).

-import(hm_bench_lib, [sleep_until/1, merge_add/2, key/1]).

-include("hm_bench.hrl").

%%% ============================================================= on the nodes

%% @doc Create a workload's tables for a context (on node 1, for all nodes): the bench's four,
%% or the simple workload's `kv' with attributes `[key, val]'.
-spec node_create(hm_bench_workload:context(), {atom(), [node()]}, bench | simple) -> ok.
node_create(Ctx, {Storage, Nodes}, Workload) ->
    lists:foreach(
      fun(T) ->
              Opts = [{attributes, case T of
                                       ?KV -> [key, val];
                                       _ -> hm_bench_workload:attrs(T)
                                   end},
                      {Storage, Nodes}],
              {atomic, ok} = case Ctx of
                                 {async_ec, Type} ->
                                     hypermnesia:create_table(T, [{type, Type} | Opts]);
                                 _ -> mnesia:create_table(T, [{type, set} | Opts])
                             end
      end, case Workload of simple -> [?KV]; bench -> ?TABS end).

%% @doc Delete one table (EC or not).
-spec node_delete(atom()) -> term().
node_delete(T) -> hypermnesia:delete_table(T).

%% @doc Populate: subscribers, groups (random permission masks), servers; sessions empty. The
%% simple workload: keys 1..N, value 0.
-spec node_populate(hm_bench_workload:context(), pos_integer(), bench | simple) -> ok.
node_populate(Ctx, Keys, simple) ->
    _ = [hm_bench_workload:run_in(pop_ctx(Ctx), fun() -> [ok = mnesia:write({?KV, K, 0})
                                        || K <- lists:seq(B, min(Keys, B + 99))], ok end)
         || B <- lists:seq(1, Keys, 100)],
    ok;
node_populate(Ctx, Subs, bench) ->
    rand:seed(exsss, {1, 2, 3}),
    Write = fun(Recs) ->
                    hm_bench_workload:run_in(pop_ctx(Ctx),
                                             fun() -> [ok = mnesia:write(R) || R <- Recs], ok end)
            end,
    _ = [Write([{group, G, <<"group">>, mask(), mask(), mask()}]) || G <- lists:seq(1, ?GROUPS)],
    _ = [Write([{server, S, 0, 0, 0}]) || S <- lists:seq(1, ?SERVERS)],
    _ = [Write([{subscriber, N, <<"subscriber">>, 1 + N rem ?GROUPS, 0, 0, node(), 0}
                || N <- lists:seq(B, min(Subs, B + 99))])
         || B <- lists:seq(1, Subs, 100)],
    ok.

%% populate plain tables with async_dirty (fast), EC tables through their own context
pop_ctx({async_ec, _} = C) -> C;
pop_ctx(_) -> sync_dirty.

mask() -> (rand:uniform(256) - 1) bor 2#01010101.

%% @doc A public table of the simple workload's records on this node, owned by a registered
%% process that does, for every record another node sends it, the same `ets:insert': the
%% `floor' context.
-spec node_floor_start(pos_integer()) -> ok.
node_floor_start(Keys) ->
    ok = node_floor_stop(),
    Me = self(),
    Pid = spawn(fun() ->
                        ?FLOOR_TAB = ets:new(?FLOOR_TAB, [set, public, named_table,
                                                          {keypos, 2}]),
                        true = ets:insert(?FLOOR_TAB, [{?KV, K, 0} || K <- lists:seq(1, Keys)]),
                        true = register(hm_bench_floor, self()),
                        Me ! {floor_ready, self()},
                        floor_sink()
                end),
    receive {floor_ready, Pid} -> ok after 30000 -> erlang:error(floor_not_ready) end.

floor_sink() ->
    receive
        {stop, From} -> From ! {floor_stopped, self()};
        Rec -> ets:insert(?FLOOR_TAB, Rec), floor_sink()
    end.

%% @doc Stop this node's floor process (its table goes with it).
-spec node_floor_stop() -> ok.
node_floor_stop() ->
    case whereis(hm_bench_floor) of
        undefined -> ok;
        Pid -> Pid ! {stop, self()},
               receive {floor_stopped, Pid} -> ok after 30000 -> ok end
    end.

%% @doc Free a registered name a run before may have left (its process may be gone).
-spec unregister_if(atom()) -> ok.
unregister_if(Name) ->
    try unregister(Name), ok catch error:badarg -> ok end.

%% @doc Start the generators on this node; they wait for `start_at'. With `idle_max_ms', also
%% the idle watcher (see watcher/1), and the generators' summary waits until it is done.
-spec node_start(map()) -> ok.
node_start(Spec = #{gens := G}) ->
    Watcher = case maps:get(idle_max_ms, Spec, none) of
                  none -> none;
                  _ -> W = spawn(fun() -> watcher(Spec) end),
                       unregister_if(hm_bench_idle),
                       true = register(hm_bench_idle, W),
                       W
              end,
    Self = spawn(fun() -> runner(Spec, G, Watcher) end),
    unregister_if(hm_bench_runner),
    true = register(hm_bench_runner, Self),
    ok.

runner(Spec, G, Watcher) ->
    Me = self(),
    Restarts0 = mnesia:system_info(transaction_restarts),
    Pids = [spawn_link(fun() -> Me ! {gen_done, generator(Spec, I)} end)
            || I <- lists:seq(1, G)],
    Rs = [receive {gen_done, R} -> R end || _ <- Pids],
    Restarts = mnesia:system_info(transaction_restarts) - Restarts0,
    case Watcher of
        none -> ok;
        _ -> Watcher ! {gens_done, self(), erlang:system_time(millisecond)},
             receive {idle_done, Watcher} -> ok
             after maps:get(idle_max_ms, Spec) + 30000 -> ok
             end
    end,
    Lat = lists:sort(lists:append([maps:get(lat, R) || R <- Rs])),
    Sum = #{ops => lists:sum([maps:get(ops, R) || R <- Rs]),
            errors => lists:sum([maps:get(errors, R) || R <- Rs]),
            misses => lists:sum([maps:get(misses, R) || R <- Rs]),
            restarts => Restarts,
            by_type => lists:foldl(fun(R, A) -> merge_add(maps:get(by_type, R), A) end, #{}, Rs),
            per_sec => lists:foldl(fun(R, A) -> merge_add(maps:get(per_sec, R), A) end, #{}, Rs),
            lat => lat_stats(Lat),
            ops_all => lists:sum([maps:get(ops_all, R) || R <- Rs]),
            writes_all => lists:sum([maps:get(writes_all, R) || R <- Rs]),
            error_samples => lists:sublist(lists:append([maps:get(err_samples, R) || R <- Rs]), 3)},
    receive {collect, From} -> From ! {bench_result, Sum} end.

%% The idle watcher of a point. At `start_at' it reads the VM's CPU time; when the runner says
%% the generators are done, it reads the EC copies' unstable operations (`unstable_ops' of
%% hypermnesia:info/1, summed over the tables), then polls every 10 ms until the node is idle:
%% no message waiting in any Mnesia or Hypermnesia process (registered `mnesia*', `hm_*',
%% the floor's receiver, the EC table processes) and, for EC, no buffered and no unstable
%% operation, continuously for ?IDLE_STREAK_MS. The CPU time is read at the first poll of
%% that idle stretch. `unstable_drain_ms': from the generators' end to the last poll that
%% found unstable operations (0 when there were none); `idle_reached' false when the node was
%% not idle within `idle_max_ms' (its CPU is then counted to that moment).
watcher(#{start_at := StartAt, ctx := Ctx, tabs := Tabs, idle_max_ms := Max}) ->
    sleep_until(StartAt),
    {Cpu0, _} = erlang:statistics(runtime),
    {Runner, DoneAt} = receive {gens_done, R, T} -> {R, T} end,
    {CpuStop, _} = erlang:statistics(runtime),
    EC = case Ctx of {async_ec, _} -> true; _ -> false end,
    {U0, _} = backlog(EC, Tabs),
    Res = watch(EC, Tabs, DoneAt + Max, DoneAt, case U0 of 0 -> DoneAt; _ -> none end, none,
                [], []),
    Runner ! {idle_done, self()},
    Out = Res#{cpu_ms => maps:get(cpu_at_idle, Res) - Cpu0, cpu_load_ms => CpuStop - Cpu0,
               unstable_at_stop => U0},
    watcher_result(maps:without([cpu_at_idle], Out), Max + 120000).

watcher_result(Out, Wait) ->
    receive
        {idle_result, From} -> From ! {idle_result, self(), Out};
        {gens_done_query, From} -> From ! {gens_done, self()}, watcher_result(Out, Wait);
        {hash_us, _, _} -> watcher_result(Out, Wait)
    after Wait -> ok
    end.

%% LastU: the time of the last poll that saw unstable operations (DoneAt when none);
%% Streak: {time, cpu} of the first poll of the current idle stretch, or none; Busy: what the
%% last poll that found the node busy saw (in the result, to tell what kept a node busy);
%% Hash: [{at, us}] of the cool-down's hash polls on this node (node_hash/1 reports them)
watch(EC, Tabs, Deadline, DoneAt, LastU, Streak, Busy, Hash) ->
    Now = erlang:system_time(millisecond),
    {Cpu, _} = erlang:statistics(runtime),
    {U, B} = backlog(EC, Tabs),
    LastU1 = case U of 0 -> LastU; _ -> Now end,
    Queues = busy_queues(),
    Idle = U =:= 0 andalso B =:= 0 andalso Queues =:= [],
    Busy1 = case Idle of
                true -> Busy;
                false -> [{unstable, U}, {buffered, B}, {at_ms, Now - DoneAt} | Queues]
            end,
    %% none: there were unstable operations at the stop, and no poll saw any since
    Drain = fun(none) -> 0; (L) -> max(0, L - DoneAt) end,
    %% wall time of the hash polls up to a moment: an upper bound of their CPU
    HashMs = fun(Until) -> lists:sum([Us || {At, Us} <- Hash, At =< Until]) / 1000 end,
    case {Idle, Streak} of
        {true, {T0, C0}} when Now - T0 >= ?IDLE_STREAK_MS ->
            #{idle_reached => true, idle_ms => max(0, T0 - DoneAt), cpu_at_idle => C0,
              unstable_drain_ms => Drain(LastU1),
              last_busy => busy_json(Busy1), hash_poll_ms => HashMs(T0)};
        _ when Now > Deadline ->
            #{idle_reached => false, idle_ms => null, cpu_at_idle => Cpu,
              unstable_drain_ms => case U of 0 -> Drain(LastU1); _ -> null end,
              last_busy => busy_json(Busy1), hash_poll_ms => HashMs(Now)};
        _ ->
            Streak1 = case {Idle, Streak} of
                          {true, none} -> {Now, Cpu};
                          {true, _} -> Streak;
                          {false, _} -> none
                      end,
            Hash1 = pause(Now + 10, Hash),
            watch(EC, Tabs, Deadline, DoneAt, LastU1, Streak1, Busy1, Hash1)
    end.

%% the watcher's 10 ms between polls: answer queries, note the hash polls' reports
pause(Until, Hash) ->
    receive
        {gens_done_query, From} -> From ! {gens_done, self()}, pause(Until, Hash);
        {hash_us, At, Us} -> pause(Until, [{At, Us} | Hash])
    after max(0, Until - erlang:system_time(millisecond)) -> Hash
    end.

busy_json(Busy) -> maps:from_list([{key(K), V} || {K, V} <- Busy]).

%% {unstable, buffered} operations of this node's EC copies of the tables (one info call each)
backlog(false, _) -> {0, 0};
backlog(true, Tabs) ->
    lists:foldl(fun(T, {U, B}) ->
                        case hm_check:outcome(fun() -> hypermnesia:info(T) end) of
                            #{unstable_ops := U1, buffered_ops := B1} -> {U + U1, B + B1};
                            _ -> {U, B}
                        end
                end, {0, 0}, Tabs).

%% the watched processes with messages waiting: [{name or pid, queue length}]
busy_queues() ->
    Named = [{N, P} || N <- erlang:registered(), watched_name(atom_to_list(N)),
                       P <- [whereis(N)], is_pid(P)],
    [{Id, L} || {Id, P} <- Named ++ [{T, T} || T <- table_pids()],
                {message_queue_len, L} <- [erlang:process_info(P, message_queue_len)], L > 0].

watched_name("hm_bench_floor") -> true;
watched_name("hm_bench_" ++ _) -> false;
watched_name(N = "hm_" ++ _) -> not_sup(N);
watched_name(N = "mnesia" ++ _) -> not_sup(N);
watched_name(_) -> false.

%% supervisors do none of the work, and the sampler asks hm_ec_table_sup for its children
%% every 20 ms: its queue says nothing about the node being busy
not_sup(N) -> not lists:suffix("_sup", N).

%% @doc This node's EC table processes (none before Hypermnesia's table supervisor runs).
-spec table_pids() -> [pid()].
table_pids() ->
    case whereis(hm_ec_table_sup) of
        undefined -> [];
        _ -> hm_ec_server:table_pids()
    end.

%% @doc Return once this node's generators have all stopped (the idle watcher knows).
-spec node_gens_done(timeout()) -> ok | timeout.
node_gens_done(Timeout) ->
    case whereis(hm_bench_idle) of
        undefined -> ok;
        W -> W ! {gens_done_query, self()},
             receive {gens_done, W} -> ok after Timeout -> timeout end
    end.

%% @doc The idle watcher's result (see watcher/1): CPU ms of this VM from the start of the load
%% to idle, unstable operations when the generators stopped and the time they took to drain.
-spec node_idle_result(timeout()) -> map().
node_idle_result(Timeout) ->
    case whereis(hm_bench_idle) of
        undefined -> #{missing => true};
        W -> W ! {idle_result, self()},
             receive {idle_result, W, R} -> R after Timeout -> #{timeout => true} end
    end.

%% @doc Wait for this node's generators and return their summary.
-spec node_collect(timeout()) -> map().
node_collect(Timeout) ->
    hm_bench_runner ! {collect, self()},
    receive {bench_result, S} -> S after Timeout -> #{timeout => true} end.

generator(Spec = #{start_at := StartAt, stop_at := StopAt, warm_ms := Warm}, I) ->
    rand:seed(exsss, {erlang:phash2(node()), I, StartAt}),
    Peers = [{hm_bench_floor, N} || N <- maps:get(nodes, Spec, []), N =/= node()],
    sleep_until(StartAt),
    gen_loop(Spec#{peers => Peers}, StartAt + Warm, StopAt,
             #{ops => 0, errors => 0, misses => 0, by_type => #{}, per_sec => #{}, lat => [],
               err_samples => [], ops_all => 0, writes_all => 0}).

gen_loop(Spec = #{start_at := StartAt}, MeasFrom, StopAt, Acc0) ->
    T0 = erlang:monotonic_time(microsecond),
    Now = erlang:system_time(millisecond),
    case Now >= StopAt of
        true -> Acc0;
        false ->
            {Type, Outcome, Writes} = one_op(Spec),
            Acc = case Outcome of
                      {error, _} -> Acc0;
                      _ -> Acc0#{ops_all := maps:get(ops_all, Acc0) + 1,
                                 writes_all := maps:get(writes_all, Acc0) + Writes}
                  end,
            Lat = erlang:monotonic_time(microsecond) - T0,
            Sec = (Now - StartAt) div 1000,
            Acc1 = case Now >= MeasFrom of
                       true -> record(Acc, Type, Lat, Outcome);
                       false -> Acc
                   end,
            Acc2 = case Outcome of
                       {error, _} -> Acc1;
                       _ -> Acc1#{per_sec := maps:update_with(Sec, fun(X) -> X + 1 end, 1,
                                                              maps:get(per_sec, Acc1))}
                   end,
            gen_loop(Spec, MeasFrom, StopAt, Acc2)
    end.

%% One request of the spec's workload: {type, outcome, records written}.
one_op(#{workload := simple, ctx := Ctx, subs := Keys, read_pct := ReadPct, peers := Peers}) ->
    K = rand:uniform(Keys),
    case rand:uniform(100) =< ReadPct of
        true ->
            Outcome = try simple_read(Ctx, K) of
                          [] -> miss;
                          _ -> ok
                      catch Cl:Re -> {error, {Cl, Re}}
                      end,
            {read, Outcome, 0};
        false ->
            Rec = {?KV, K, rand:uniform(1 bsl 27)},
            Outcome = try simple_write(Ctx, Rec, Peers) of
                          _ -> ok
                      catch Cl:Re -> {error, {Cl, Re}}
                      end,
            {write, Outcome, 1}
    end;
one_op(#{ctx := Ctx, subs := Subs, read_pct := ReadPct}) ->
    Type = pick(ReadPct),
    Sub = rand:uniform(Subs),
    Args = #{bit => rand:uniform(?BITS) - 1, server => rand:uniform(?SERVERS)},
    F = hm_bench_workload:Type(Sub, Args),
    try hm_bench_workload:run_in(Ctx, F) of
        not_found -> {Type, miss, 0};
        denied -> {Type, ok, 0};
        _ -> {Type, ok, writes_of(Type)}
    catch Cl:Re -> {Type, {error, {Cl, Re}}, 0}
    end.

%% records written (or deleted) by a transaction type that ran through
writes_of(t1) -> 1;
writes_of(t4) -> 3;
writes_of(t5) -> 3;
writes_of(_) -> 0.

simple_read(floor, K) -> ets:lookup(?FLOOR_TAB, K);
simple_read(Ctx, K) -> hm_bench_workload:run_in(Ctx, fun() -> mnesia:read({?KV, K}) end).

%% the floor: one insert here, one message to each peer's receiver, which inserts it there
simple_write(floor, Rec, Peers) ->
    true = ets:insert(?FLOOR_TAB, Rec),
    lists:foreach(fun(Dest) -> erlang:send(Dest, Rec) end, Peers);
simple_write(Ctx, Rec, _) -> hm_bench_workload:run_in(Ctx, fun() -> mnesia:write(Rec) end).

record(Acc = #{ops := O, errors := E, misses := M, by_type := BT, lat := L, err_samples := ES},
       Type, Lat, Outcome) ->
    case Outcome of
        {error, R} -> Acc#{errors := E + 1, err_samples := lists:sublist([R | ES], 3)};
        _ -> Acc#{ops := O + 1, misses := M + case Outcome of miss -> 1; _ -> 0 end,
                  by_type := maps:update_with(Type, fun(X) -> X + 1 end, 1, BT),
                  lat := [Lat | L]}
    end.

%% read_pct% read-only (t2, t3 evenly); the rest updates: t1 half, t4 and t5 a quarter each.
pick(ReadPct) ->
    X = rand:uniform(10000) - 1,
    R = ReadPct * 100,
    if X < R -> case X rem 2 of 0 -> t2; _ -> t3 end;
       true -> case (X - R) rem 4 of 0 -> t1; 1 -> t1; 2 -> t4; _ -> t5 end
    end.

lat_stats([]) -> #{n => 0};
lat_stats(L) ->
    [P50, P95, P99, Max] = hm_bench_stats:percentiles(L, [0.50, 0.95, 0.99, 1]),
    #{n => length(L), mean_us => hm_bench_stats:mean(L), p50_us => P50, p95_us => P95,
      p99_us => P99, max_us => Max}.

%% @doc Memory in words per table on this node, and of a plain ETS set with the same records.
-spec node_memory([atom()]) -> map().
node_memory(Tabs) ->
    lists:foldl(
      fun(T, A) ->
              Own = mnesia:table_info(T, memory),
              Info = hypermnesia:info(T),
              Helpers = case hypermnesia:ec_options(T) of
                            {ok, #{meta := M, log := L}} ->
                                mnesia:table_info(M, memory) + mnesia:table_info(L, memory)
                                    + ram_metadata_words(T, Info);
                            error -> 0
                        end,
              E = ets:new(plain, [set, public, {keypos, 2}]),
              ets:insert(E, mnesia:dirty_select(T, [{'_', [], ['$_']}])),
              Plain = ets:info(E, memory),
              ets:delete(E),
              %% how many times the copy here caught up by state during the point
              CatchUps = case Info of
                             #{state_catch_ups := N} -> N;
                             _ -> 0
                         end,
              %% the keys with a metadata row (after quiescence: those holding concurrent
              %% versions the policy does not show) and the keys of the table
              MetaKeys = case Info of
                             #{unstable_keys := MK} -> MK;
                             _ -> 0
                         end,
              A#{T => #{table_words => Own, helper_words => Helpers, plain_set_words => Plain,
                        state_catch_ups => CatchUps, meta_keys => MetaKeys,
                        keys => mnesia:table_info(T, size)}}
      end, #{}, Tabs).

%% A ram copy keeps its metadata in an ETS table of the table's process, not in the Mnesia
%% table named by ec_options (which stays empty): counted from `metadata_words' of info/1.
%% A disc copy's metadata is that Mnesia table, counted already.
ram_metadata_words(T, #{metadata_words := W}) ->
    case mnesia:table_info(T, storage_type) of
        ram_copies -> W;
        _ -> 0
    end;
ram_metadata_words(_, _) -> 0.

%% @doc A hash of this node's content of the tables: per table its size and the sum of its
%% records' hashes, which does not depend on the order ETS keeps them in. The cool-down polls
%% it every 20 ms on every node while the copies converge (and while the CPU per write is
%% measured): sorting a copy of each table, as this did before, cost about ten times as much
%% CPU per poll (tens of ms for 10,000 subscribers on this host), which slowed the
%% convergence being measured.
-spec node_hash([atom()]) -> integer().
%% While a point's idle watcher runs, each hash reports its wall time to it: the CPU per
%% write counts these polls, and the watcher says how much they could have added.
node_hash(Tabs) ->
    {Us, H} = timer:tc(fun() ->
                               erlang:phash2([ets:foldl(fun(R, S) -> S + erlang:phash2(R, 1 bsl 32) end,
                                                        ets:info(T, size), T) || T <- Tabs])
                       end),
    case whereis(hm_bench_idle) of
        undefined -> ok;
        W -> W ! {hash_us, erlang:system_time(millisecond), Us}
    end,
    H.

%% @doc Whether every EC table here has no buffered and no unstable operation.
-spec node_ec_quiet([atom()]) -> boolean().
node_ec_quiet(Tabs) ->
    lists:all(fun(T) ->
                      case hypermnesia:info(T) of
                          #{buffered_ops := 0, unstable_ops := 0} -> true;
                          _ -> false
                      end
              end, Tabs).

%% @doc The reductions of this node's EC table processes so far.
-spec node_table_reductions() -> non_neg_integer().
node_table_reductions() ->
    lists:sum([R || P <- hm_ec_server:table_pids(), is_pid(P),
                    {reductions, R} <- [erlang:process_info(P, reductions)]]).

%% @doc A table's step totals here (`step_totals' of hypermnesia:info/1, by kind:
%% steps, microseconds, reductions) and the operations this copy applied: its own and the
%% other copies'.
-spec node_step_totals(atom()) -> map().
node_step_totals(Tab) ->
    Info = hypermnesia:info(Tab),
    D = maps:get(delivered, Info),
    Own = lists:sum([N || {{Nd, _}, N} <- maps:to_list(D), Nd =:= node()]),
    #{totals => maps:from_list([{atom_to_binary(K), #{steps => N, us => Us, reductions => R}}
                                || {K, {N, Us, R}} <- maps:to_list(maps:get(step_totals, Info,
                                                                            #{}))]),
      own_ops => Own, remote_ops => lists:sum(maps:values(D)) - Own}.

%% @doc Counters for the delta over a run: transaction restarts, reductions, runtime.
-spec node_stats() -> map().
node_stats() ->
    {Red, _} = erlang:statistics(reductions),
    {Run, _} = erlang:statistics(runtime),
    SrvRed = lists:sum([R || P <- ec_pids(), {reductions, R} <- [erlang:process_info(P, reductions)]]),
    #{restarts => mnesia:system_info(transaction_restarts),
      commits => mnesia:system_info(transaction_commits),
      failures => mnesia:system_info(transaction_failures),
      reductions => Red, runtime_ms => Run, ec_server_reductions => SrvRed}.

%% @doc The processes doing this node's EC work: its EC server and one process per EC table.
-spec ec_pids() -> [pid()].
ec_pids() ->
    case whereis(hm_ec_table_sup) of
        undefined -> [];
        _ -> [P || P <- [whereis(hm_ec_server) | hm_ec_server:table_pids()], is_pid(P)]
    end.
