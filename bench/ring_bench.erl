%% @doc `make bench-ring': partitioned EC tables measured the way "RELEASE: Scalable persistent
%% storage for Erlang" measures Erlang DBMSs ("Scalability of Erlang DBMSs": throughput by
%% number of nodes), against Mnesia's own fragmented tables in the same run.
%%
%% For each node count (default 1, 3, 5, 7; `HM_RING_NODES=1,3,5,7,10') it starts that many
%% peer nodes ({@link hm_cluster}) and measures, one after the other on the same nodes:
%% <ul>
%% <li>`mnesia_frag': a Mnesia fragmented table (`n_fragments' 32, `n_ram_copies' min(3, n),
%%     the pool of all nodes) under `mnesia:activity(async_dirty, F, [], mnesia_frag)';</li>
%% <li>`ec_partitioned': a partitioned EC table (32 fragments, min(3, n) copies each) under
%%     `hypermnesia:async_ec/1';</li>
%% <li>`ec_full': an EC table with a copy on every node (today's default) under `async_ec'.</li>
%% </ul>
%% Two generators per node run 80 % writes and 20 % reads of random keys among 10,000 for
%% `HM_RING_SECONDS' (default 3) after a 1 s warm-up; the throughput is the operations
%% completed per second over all nodes. Messages per write come from the simulator
%% ({@link hm_sim_frag} and {@link hm_sim}, no faults): every protocol message (operations,
%% acknowledgements, retransmissions) a write causes, exactly, for the same node counts.
%%
%% Writes `bench/results/ring-<yyyymmdd-hhmm>.md'. On a host with fewer cores than nodes the
%% nodes share the cores: the figures then show the cost per operation more than scaling.
-module(ring_bench).

-export([main/1, gen_loop/5, msgs_per_write/2]).

-define(F, 32).
-define(KEYS, 10000).
-define(GENS, 2).

-spec main([string()]) -> no_return().
main([Out]) ->
    Counts = [list_to_integer(X) || X <- string:tokens(env("HM_RING_NODES", "1,3,5,7"), ",")],
    Secs = list_to_integer(env("HM_RING_SECONDS", "3")),
    T0 = erlang:monotonic_time(millisecond),
    Rows = [point(N, Secs) || N <- Counts],
    Msgs = [{N, msgs_per_write(frag, N), msgs_per_write(full, N)} || N <- Counts],
    Wall = (erlang:monotonic_time(millisecond) - T0) div 1000,
    write_report(Out, Secs, Rows, Msgs, Wall),
    io:format("wrote ~s~n", [Out]),
    halt(0).

env(K, D) -> case os:getenv(K) of false -> D; "" -> D; V -> V end.

point(N, Secs) ->
    Dir = filename:join(env("TMPDIR", "/tmp"), "hm_ring_bench_" ++ os:getpid()),
    C = hm_cluster:start(#{nodes => N, dir => Dir, prefix => "rb" ++ integer_to_list(N),
                           modules => [?MODULE]}),
    try
        Nodes = hm_cluster:nodes(C),
        Copies = min(3, N),
        Frag = [{frag_properties, [{n_fragments, ?F}, {n_ram_copies, Copies},
                                   {node_pool, Nodes}]}],
        {atomic, ok} = hm_cluster:call(C, 1, mnesia, create_table,
                                       [rb_mnesia, [{attributes, [k, v]} | Frag]]),
        {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                       [rb_part, [{type, pawset}, {attributes, [k, v]} | Frag]]),
        {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                       [rb_full, [{type, pawset}, {attributes, [k, v]},
                                                  {ram_copies, Nodes}]]),
        R = [{Name, measure(C, N, Tab, Ctx, Secs)}
             || {Name, Tab, Ctx} <- [{mnesia_frag, rb_mnesia, frag},
                                     {ec_partitioned, rb_part, ec},
                                     {ec_full, rb_full, ec}]],
        io:format("~p nodes: ~p~n", [N, R]),
        {N, R}
    after
        hm_cluster:stop(C),
        _ = file:del_dir_r(Dir)
    end.

%% Operations per second over all nodes, `?GENS' generators per node.
measure(C, N, Tab, Ctx, Secs) ->
    Self = self(),
    Gens = [spawn_link(fun() ->
                               Count = hm_cluster:call(C, I, ?MODULE, gen_loop,
                                                       [Tab, Ctx, 1000, Secs * 1000, I * 100 + G],
                                                       (Secs + 60) * 1000),
                               Self ! {count, self(), Count}
                       end) || I <- lists:seq(1, N), G <- lists:seq(1, ?GENS)],
    Total = lists:sum([receive {count, P, Cn} -> Cn end || P <- Gens]),
    round(Total / Secs).

%% On a node: warm up for `Warm' ms, then count the operations done in `Ms' ms.
gen_loop(Tab, Ctx, Warm, Ms, Seed) ->
    rand:seed(exsss, {Seed, 7, 11}),
    Now = erlang:monotonic_time(millisecond),
    _ = ops(Tab, Ctx, Now + Warm, 0),
    ops(Tab, Ctx, erlang:monotonic_time(millisecond) + Ms, 0).

ops(Tab, Ctx, Until, N) ->
    case N rem 64 =:= 0 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N;
        false ->
            K = rand:uniform(?KEYS),
            F = case rand:uniform(10) =< 8 of
                    true -> fun() -> mnesia:write({Tab, K, N}) end;
                    false -> fun() -> mnesia:read(Tab, K) end
                end,
            _ = case Ctx of
                    frag -> mnesia:activity(async_dirty, F, [], mnesia_frag);
                    ec -> hypermnesia:async_ec(F)
                end,
            ops(Tab, Ctx, Until, N + 1)
    end.

%% Messages per client write in the simulator, without faults: partitioned (3 copies of a
%% fragment, on `N' nodes) or fully replicated (`N' copies).
msgs_per_write(frag, N) ->
    Cfg = #{kind => frag, n => N, fragments => ?F, copies => min(3, N), type => pawset,
            policy => term_order, storage => ram, drop => 0.0, dup => 0.0, delay => 5,
            duration => 5000, seed => 1, skew => #{}},
    ratio(hm_sim_frag:run(Cfg, sim_writes(N)));
msgs_per_write(full, N) ->
    Cfg = #{n => N, type => pawset, policy => term_order, storage => ram, drop => 0.0,
            dup => 0.0, delay => 5, duration => 5000, seed => 1, keys => [k1],
            skew => maps:from_list([{Nd, 0} || Nd <- hm_sim:nodes_of(N)])},
    ratio(hm_sim:run(Cfg, [{T, {op, Nd, K, W}} || {T, {op, Nd, K, W}} <- sim_writes(N)])).

sim_writes(N) ->
    Nodes = hm_sim:nodes_of(N),
    [{10 + I * 4, {op, lists:nth(I rem N + 1, Nodes), list_to_atom("k" ++ integer_to_list(I rem 6 + 1)),
                   {write, a}}} || I <- lists:seq(1, 1000)].

ratio(#{stats := St}) ->
    Ops = maps:get(ops, St, 0),
    case Ops of
        0 -> 0.0;
        _ -> maps:get(msgs, St, 0) / Ops
    end.

write_report(Out, Secs, Rows, Msgs, Wall) ->
    Id = filename:basename(Out, ".md"),
    Head = io_lib:format(
             "# Partitioned tables by node count (run ~s)~n~n"
             "`make bench-ring`: ~p fragments, min(3, n) RAM copies each, ~p generators per "
             "node, 80 % writes / 20 % reads of ~p keys, ~p s per point after 1 s of warm-up; "
             "host: ~p schedulers, OTP ~s; wall time ~p s.~n~n"
             "| nodes | Mnesia fragmented, async_dirty (ops/s) | EC partitioned (ops/s) | "
             "EC one copy per node (ops/s) | partitioned / Mnesia | partitioned / one copy "
             "per node |~n|---|---|---|---|---|---|~n",
             [Id, ?F, ?GENS, ?KEYS, Secs, erlang:system_info(schedulers_online),
              erlang:system_info(otp_release), Wall]),
    Lines = [io_lib:format("| ~p | ~p | ~p | ~p | ~.2f | ~.2f |~n",
                           [N, M, P, Fu, P / max(1, M), P / max(1, Fu)])
             || {N, R} <- Rows,
                [M, P, Fu] <- [[proplists:get_value(K, R) || K <- [mnesia_frag, ec_partitioned,
                                                                   ec_full]]]],
    MsgHead = "\nMessages per write in the simulator, no faults (operations, acknowledgements "
              "and their retransmissions; 1000 writes spread over the nodes):\n\n"
              "| nodes | partitioned, 3 copies | one copy per node |\n|---|---|---|\n",
    MsgLines = [io_lib:format("| ~p | ~.1f | ~.1f |~n", [N, Fr, Fu]) || {N, Fr, Fu} <- Msgs],
    ok = file:write_file(Out, [Head, Lines, MsgHead, MsgLines]).
