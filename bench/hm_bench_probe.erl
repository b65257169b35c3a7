%% @doc Where a peer node's CPU goes during `make bench': microstate accounting and
%% reductions per process, the EC table processes' queues sampled, the cost of each step of
%% one EC write, eprof, and the messages the EC processes receive by kind.
-module(hm_bench_probe).

%% run on the peer nodes
-export([node_where_start/0, node_where_stop/0, node_sample_start/0, node_sample_stop/0,
         node_sample_stop/1, node_costs/1, node_eprof/1, node_trace_start/0, node_trace_stop/0,
         node_remote_delivered/1]).

-import(hm_bench_lib, [merge_add/2]).

-include("hm_bench.hrl").

%%% ============================================================= where the CPU goes

%% @doc Start counting where this node's CPU goes: the schedulers' time by state (`msacc',
%% microstate accounting: running Erlang code, garbage collection, ports, ...) and every
%% process's reductions, from now until node_where_stop/0.
-spec node_where_start() -> ok.
node_where_start() ->
    Reds = maps:from_list([{P, R} || P <- erlang:processes(),
                                     {reductions, R} <- [erlang:process_info(P, reductions)]]),
    {Total, _} = erlang:statistics(exact_reductions),
    persistent_term:put({?MODULE, where}, {Reds, Total}),
    true = msacc:start(),
    ok.

%% @doc What node_where_start/0 started: `msacc_us', the normal and dirty CPU schedulers'
%% microseconds by state, summed over the threads (`sleep' left out); `reductions', the
%% reductions since the start by kind of process (where_kind/1; processes that exited in
%% between, such as the generators, under `exited').
-spec node_where_stop() -> map().
node_where_stop() ->
    Stats = msacc:stats(),
    _ = msacc:stop(),
    {Reds0, Total0} = persistent_term:get({?MODULE, where}),
    {Total, _} = erlang:statistics(exact_reductions),
    Tables = hm_bench_node:table_pids(),
    Live = [{where_kind(P, Tables), R - maps:get(P, Reds0, 0)}
            || P <- erlang:processes(), {reductions, R} <- [erlang:process_info(P, reductions)]],
    ByKind = lists:foldl(fun({K, R}, A) -> maps:update_with(K, fun(X) -> X + R end, R, A) end,
                         #{}, Live),
    Exited = (Total - Total0) - lists:sum([R || {_, R} <- Live]),
    Us = lists:foldl(
           fun(#{type := T, counters := Cs}, A) when T =:= scheduler; T =:= dirty_cpu_scheduler ->
                   merge_add(maps:remove(sleep, Cs), A);
              (_, A) -> A
           end, #{}, Stats),
    #{msacc_us => Us, reductions => ByKind#{exited => max(0, Exited)}}.

%% what kind of work a process does, for node_where_stop/0
where_kind(P, Tables) ->
    case lists:member(P, Tables) of
        true -> ec_table;
        false ->
            case erlang:process_info(P, registered_name) of
                {registered_name, hm_bench_floor} -> floor_receiver;
                {registered_name, mnesia_tm} -> mnesia_tm;
                {registered_name, N} when is_atom(N) ->
                    case atom_to_list(N) of
                        "hm_bench" ++ _ -> bench;
                        "hm_" ++ _ -> hm_other;
                        "mnesia" ++ _ -> mnesia_other;
                        _ -> other
                    end;
                _ -> other
            end
    end.

%% @doc Sample the EC processes' longest message queue every 20 ms until stopped, the
%% other members' operations the EC table processes hold queued (their work queue: received, not
%% applied yet; they wait there rather than in the mailbox), and the memory of the EC table
%% processes (erlang:process_info(P, memory): heap, stack, message queue and process
%% overhead, in bytes): the peak of their sum and of the largest one.
-spec node_sample_start() -> ok.
node_sample_start() ->
    hm_bench_node:unregister_if(hm_bench_sampler),
    register(hm_bench_sampler, spawn(fun() -> sampler([], {0, 0}) end)),
    ok.

sampler(Acc, {MemSum, MemOne}) ->
    receive {stop, From} -> From ! {samples, Acc, #{table_procs_memory_max_bytes => MemSum,
                                                    table_proc_memory_max_bytes => MemOne}}
    after 20 ->
            TPs = hm_bench_node:table_pids(),
            Q = lists:max([0 | [L || P <- [whereis(hm_ec_server) | TPs], is_pid(P),
                                     {message_queue_len, L} <- [erlang:process_info(P, message_queue_len)]]]),
            B = lists:sum([N || P <- TPs, N <- [hm_check:outcome(fun() -> gen_server:call(P, queued, 1000) end)],
                                is_integer(N)]),
            Ms = [M || P <- TPs, {memory, M} <- [erlang:process_info(P, memory)]],
            sampler([{erlang:system_time(millisecond), Q, B} | Acc],
                    {max(MemSum, lists:sum(Ms)), lists:max([MemOne | Ms])})
    end.

%% @doc Stop the sampler: max and mean of the EC processes' longest message queue.
-spec node_sample_stop() -> map().
node_sample_stop() -> node_sample_stop(0).

%% @doc The same, plus the maximum per second counted from `StartAt' (ms, system time) of
%% that queue and of the queued operations of other members.
-spec node_sample_stop(integer()) -> map().
node_sample_stop(StartAt) ->
    hm_bench_sampler ! {stop, self()},
    receive {samples, TS, Mem} ->
            S = [Q || {_, Q, _} <- TS],
            PerSec = fun(Pos) ->
                             lists:foldl(fun(X, A) when element(1, X) >= StartAt ->
                                                 Sec = (element(1, X) - StartAt) div 1000,
                                                 V = element(Pos, X),
                                                 maps:update_with(Sec, fun(Y) -> max(Y, V) end,
                                                                  V, A);
                                            (_, A) -> A
                                         end, #{}, TS)
                     end,
            Mem#{queue_max => lists:max([0 | S]), queue_mean => hm_bench_stats:mean(S), samples => length(S),
                 queue_max_per_sec => PerSec(2),
                 remote_queued_max => lists:max([0 | [B || {_, _, B} <- TS]]),
                 remote_queued_max_per_sec => PerSec(3)}
    after 5000 -> #{}
    end.

%% @doc The cost, in microseconds per call, of each step of one EC write, measured on this
%% node with no other load (tables exist as EC tables here).
-spec node_costs(pos_integer()) -> map().
node_costs(N) ->
    {atomic, ok} = mnesia:create_table(plain_sub,
                                       [{record_name, subscriber},
                                        {attributes, hm_bench_workload:attrs(subscriber)},
                                        {ram_copies, [node()]}]),
    Rec = fun(I) -> {subscriber, I, <<"subscriber">>, 1, I, 0, node(), 0} end,
    Per = fun(F) ->
                  {T, _} = timer:tc(fun() -> loop(N, F) end),
                  T / N
          end,
    R = #{is_ec_table_us => Per(fun(_) -> hypermnesia:is_ec_table(subscriber) end),
          check_record_us => Per(fun(_) -> mnesia:table_info(subscriber, record_name),
                                           mnesia:table_info(subscriber, arity) end),
          gen_server_roundtrip_us =>
              Per(fun(_) -> gen_server:call(hm_ec_table_server:name(subscriber), bench_noop) end),
          dirty_write_local_us => Per(fun(I) -> mnesia:dirty_write(plain_sub, Rec(I)) end),
          dirty_read_local_us => Per(fun(I) -> mnesia:dirty_read(subscriber, I) end),
          async_dirty_write_local_us =>
              Per(fun(I) -> mnesia:activity(async_dirty,
                                            fun() -> mnesia:write(plain_sub, Rec(I), write) end)
                  end),
          async_ec_write_us =>
              Per(fun(I) -> hypermnesia:async_ec(fun() -> mnesia:write(Rec(I)) end) end),
          async_ec_read_us =>
              Per(fun(I) -> hypermnesia:async_ec(fun() -> mnesia:read({subscriber, I}) end) end),
          submit_direct_us =>
              Per(fun(I) -> hm_ec_server:submit(subscriber, {I, {write, Rec(I)}}, async) end)},
    {atomic, ok} = mnesia:delete_table(plain_sub),
    R.

sink() ->
    receive
        {io_request, From, Ref, _} -> From ! {io_reply, Ref, ok}, sink();
        _ -> sink()
    end.

loop(0, _) -> ok;
loop(N, F) -> F(N), loop(N - 1, F).

%% @doc eprof of the EC processes for `Ms' milliseconds (while generators run): the top entries.
-spec node_eprof(pos_integer()) -> list().
node_eprof(Ms) ->
    File = "/tmp/hm_bench_eprof_" ++ os:getpid() ++ ".txt",
    %% eprof prints; a peer's standard output is its control channel, so swallow it
    group_leader(spawn(fun sink/0), self()),
    {ok, _} = eprof:start(),
    profiling = eprof:start_profiling(hm_bench_node:ec_pids()),
    timer:sleep(Ms),
    profiling_stopped = eprof:stop_profiling(),
    ok = eprof:log(File),
    eprof:analyze(total, [{sort, time}]),
    stopped = eprof:stop(),
    {ok, Bin} = file:read_file(File),
    _ = file:delete(File),
    Lines = string:split(Bin, "\n", all),
    Top = lists:reverse(lists:sublist(lists:reverse([L || L <- Lines, L =/= <<>>]), 45)),
    [unicode:characters_to_binary(L) || L <- Top].

%% @doc Count, by kind, the Hypermnesia messages the EC processes receive on this node (trace).
-spec node_trace_start() -> ok.
node_trace_start() ->
    Tracer = spawn(fun() -> tracer(#{}) end),
    hm_bench_node:unregister_if(hm_bench_tracer),
    register(hm_bench_tracer, Tracer),
    _ = [erlang:trace(P, true, ['receive', {tracer, Tracer}]) || P <- hm_bench_node:ec_pids()],
    ok.

tracer(Acc) ->
    receive
        {trace, _, 'receive', {hm_ec, _, _, Msg, _Cookie}} ->
            K = case Msg of
                    T when is_tuple(T) -> element(1, T);
                    _ -> other
                end,
            tracer(maps:update_with(K, fun(X) -> X + 1 end, 1, Acc));
        {trace, _, 'receive', _} -> tracer(Acc);
        {stop, From} -> From ! {trace_counts, Acc}
    end.

%% @doc Stop counting; the counts by message kind (`op', `ack', ...).
-spec node_trace_stop() -> map().
node_trace_stop() ->
    _ = [hm_check:outcome(fun() -> erlang:trace(P, false, ['receive']) end)
         || P <- hm_bench_node:ec_pids()],
    hm_bench_tracer ! {stop, self()},
    receive {trace_counts, C} -> C after 60000 -> #{timeout => true} end.

%% @doc Operations of other nodes delivered here, summed over the tables.
-spec node_remote_delivered([atom()]) -> non_neg_integer().
node_remote_delivered(Tabs) ->
    lists:sum([N || T <- Tabs, {{Nd, _}, N} <- maps:to_list(maps:get(delivered, hypermnesia:info(T))),
                    Nd =/= node()]).
