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
%% completed per second over all nodes. For the EC tables, during one second of each point,
%% the busiest processes of node 1 by reductions (a single-process bottleneck in RELEASE's
%% sense shows as one process doing most of a node's work). Messages per write come from the simulator
%% ({@link hm_sim_frag} and {@link hm_sim}, no faults): every protocol message (operations,
%% acknowledgements, retransmissions) a write causes, exactly, for the same node counts.
%%
%% Then client latency by replication, the measure of "DottedDB: Anti-Entropy without Merkle
%% Trees, Deletes without Tombstones" (§V, client latency), on real nodes: `HM_RING_KV_NODES'
%% (default 5) peer nodes, one partitioned table per mode (16 fragments, 3 RAM copies each,
%% `pawset' showing siblings): `tcsb' (the default replication), `dotted' with node-clock
%% anti-entropy and `dotted' with Merkle anti-entropy. Two generators per node run, for
%% `HM_RING_SECONDS' after a 1 s warm-up, a read-modify-write cycle on random keys among
%% 10,000: `hypermnesia:get/3' (`r' 1), then `hypermnesia:put/4' with its context (`w' 1),
%% then an `async_ec' write of another random key; every call is timed on its generator.
%% A key's fragment has a copy on the generator's node for 3 in 5 keys; the other calls go
%% to a holder.
%%
%% Writes `bench/results/ring-<yyyymmdd-hhmm>.md'. On a host with fewer cores than nodes the
%% nodes share the cores: the figures then show the cost per operation more than scaling.
-module(ring_bench).

-export([main/1, gen_loop/5, kv_loop/4, busiest/1, msgs_per_write/2]).

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
    KvNodes = list_to_integer(env("HM_RING_KV_NODES", "5")),
    Kv = kv_point(KvNodes, Secs),
    Wall = (erlang:monotonic_time(millisecond) - T0) div 1000,
    write_report(Out, Secs, Rows, Msgs, {KvNodes, Kv}, Wall),
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

%% Operations per second over all nodes, `?GENS' generators per node; for the EC contexts
%% also the processes of node 1 that did the most work during the measurement.
measure(C, N, Tab, Ctx, Secs) ->
    Self = self(),
    Gens = [spawn_link(fun() ->
                               Count = hm_cluster:call(C, I, ?MODULE, gen_loop,
                                                       [Tab, Ctx, 1000, Secs * 1000, I * 100 + G],
                                                       (Secs + 60) * 1000),
                               Self ! {count, self(), Count}
                       end) || I <- lists:seq(1, N), G <- lists:seq(1, ?GENS)],
    %% after the warm-up, one second of the measured window
    timer:sleep(1200),
    Top = case Ctx of
              ec -> hm_cluster:call(C, 1, ?MODULE, busiest, [1000], 30000);
              frag -> []
          end,
    Total = lists:sum([receive {count, P, Cn} -> Cn end || P <- Gens]),
    {round(Total / Secs), Top}.

%% @doc On a node: the 3 processes with the most reductions over `Ms' ms, other than the
%% benchmark's generators, as `{Share, Name}': their share (%) of the node's reductions in
%% that time and their registered name (else their initial call). A single-process
%% bottleneck (RELEASE's term) shows as one process far above the others.
-spec busiest(pos_integer()) -> [{float(), term()}].
busiest(Ms) ->
    Snap = fun() ->
                   maps:from_list([{P, {R, Info}} || P <- processes(),
                                   [{reductions, R} | Info] <-
                                       [process_info(P, [reductions, registered_name,
                                                         initial_call, dictionary])]])
           end,
    A = Snap(),
    timer:sleep(Ms),
    B = Snap(),
    Deltas = [{R - element(1, maps:get(P, A, {0, []})), Info} || {P, {R, Info}} <- maps:to_list(B)],
    Sum = max(1, lists:sum([D || {D, _} <- Deltas])),
    Named = [{D, name(Info)} || {D, Info} <- Deltas, not is_generator(Info)],
    [{round(1000 * D / Sum) / 10, Nm} || {D, Nm} <- lists:sublist(lists:reverse(lists:sort(Named)), 3)].

name(Info) ->
    case proplists:get_value(registered_name, Info) of
        [] -> proplists:get_value('$initial_call', proplists:get_value(dictionary, Info, []),
                                  proplists:get_value(initial_call, Info));
        Name -> Name
    end.

%% the generators run gen_loop/5 in a process peer:call/4 started
is_generator(Info) ->
    proplists:get_value(registered_name, Info) =:= []
        andalso proplists:get_value(initial_call, Info) =:= {erlang, apply, 2}.

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

%%% ---------------------------------------------------------- client latency by replication

-define(KV_F, 16).
-define(KV_MODES, [{tcsb, rb_kv_tcsb, []},
                   {dotted, rb_kv_dotted, [{replication, dotted}]},
                   {dotted_merkle, rb_kv_merkle, [{replication, dotted}, {anti_entropy, merkle}]}]).

kv_point(N, Secs) ->
    Dir = filename:join(env("TMPDIR", "/tmp"), "hm_ring_kv_" ++ os:getpid()),
    C = hm_cluster:start(#{nodes => N, dir => Dir, prefix => "rbkv", modules => [?MODULE]}),
    try
        Nodes = hm_cluster:nodes(C),
        [{atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                        [Tab, [{type, pawset}, {attributes, [k, v]},
                                               {conflict, siblings},
                                               {frag_properties, [{n_fragments, ?KV_F},
                                                                  {n_ram_copies, min(3, N)},
                                                                  {node_pool, Nodes}]}
                                               | Opts]])
         || {_, Tab, Opts} <- ?KV_MODES],
        R = [{Mode, kv_measure(C, N, Tab, Secs)} || {Mode, Tab, _} <- ?KV_MODES],
        io:format("client latency, ~p nodes: ~p~n", [N, R]),
        R
    after
        hm_cluster:stop(C),
        _ = file:del_dir_r(Dir)
    end.

%% Per mode: cycles per second over all nodes, and per call (get, put, async_ec write) the
%% latency percentiles in µs over every generator's samples.
kv_measure(C, N, Tab, Secs) ->
    Self = self(),
    Gens = [spawn_link(fun() ->
                               Res = hm_cluster:call(C, I, ?MODULE, kv_loop,
                                                     [Tab, 1000, Secs * 1000, I * 100 + G],
                                                     (Secs + 60) * 1000),
                               Self ! {kv, self(), Res}
                       end) || I <- lists:seq(1, N), G <- lists:seq(1, ?GENS)],
    Res = [receive {kv, P, R} -> R end || P <- Gens],
    Cycles = lists:sum([Cn || {Cn, _, _} <- Res]),
    Errors = lists:sum([E || {_, E, _} <- Res]),
    Calls = [{Call, percentiles(lists:append([maps:get(Call, S) || {_, _, S} <- Res]))}
             || Call <- [get, put, write, write_here, write_passed]],
    #{cycles_per_s => round(Cycles / Secs), errors => Errors, calls => Calls}.

percentiles([]) -> #{n => 0};
percentiles(Us) ->
    [P50, P95, P99, Max] = hm_bench_stats:percentiles(lists:sort(Us), [0.50, 0.95, 0.99, 1]),
    #{n => length(Us), p50 => P50, p95 => P95, p99 => P99, max => Max}.

%% On a node: warm up for `Warm' ms, then run cycles for `Ms' ms; returns the cycles, the
%% calls that answered an error, and the latencies (µs) of the measured calls.
-spec kv_loop(atom(), non_neg_integer(), pos_integer(), integer()) ->
          {non_neg_integer(), non_neg_integer(),
           #{get | put | write | write_here | write_passed => [non_neg_integer()]}}.
kv_loop(Tab, Warm, Ms, Seed) ->
    rand:seed(exsss, {Seed, 3, 5}),
    Empty = #{get => [], put => [], write => [], write_here => [], write_passed => []},
    Now = erlang:monotonic_time(millisecond),
    _ = kv_cycles(Tab, Now + Warm, 0, 0, Empty),
    kv_cycles(Tab, erlang:monotonic_time(millisecond) + Ms, 0, 0, Empty).

kv_cycles(Tab, Until, N, E, S) ->
    case erlang:monotonic_time(millisecond) >= Until of
        true -> {N, E, S};
        false ->
            K = rand:uniform(?KEYS),
            {Tg, Got} = timer:tc(hypermnesia, get, [Tab, K, [{r, 1}]]),
            {Tp, Put} = case Got of
                            {ok, _, Ctx} -> timer:tc(hypermnesia, put, [Tab, {Tab, K, N}, Ctx, [{w, 1}]]);
                            Err -> {0, Err}
                        end,
            K2 = rand:uniform(?KEYS),
            {Tw, Wr} = timer:tc(hypermnesia, async_ec,
                                [fun() -> mnesia:write({Tab, K2, N}) end]),
            Bad = length([x || R <- [Got, Put, Wr], element(1, R) =:= error]),
            %% the write's key has a copy here, or the write is passed on to a holder
            Where = case lists:member(node(), hypermnesia:owners(Tab, K2)) of
                        true -> write_here;
                        false -> write_passed
                    end,
            S1 = S#{get := [Tg | maps:get(get, S)], write := [Tw | maps:get(write, S)],
                    Where := [Tw | maps:get(Where, S)],
                    put := case Put of ok -> [Tp | maps:get(put, S)]; _ -> maps:get(put, S) end},
            kv_cycles(Tab, Until, N + 1, E + Bad, S1)
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

write_report(Out, Secs, Rows, Msgs, {KvNodes, Kv}, Wall) ->
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
                [M, P, Fu] <- [[element(1, proplists:get_value(K, R))
                                || K <- [mnesia_frag, ec_partitioned, ec_full]]]],
    TopHead = "\nThe busiest processes of node 1 during one second of the measurement (share of "
              "the node's reductions; the generators left out): a single-process bottleneck "
              "would be one process far above the rest.\n\n"
              "| nodes | EC partitioned | EC one copy per node |\n|---|---|---|\n",
    Busy = fun(Top) -> lists:join(", ", [io_lib:format("~s ~.1f %", [busy_name(Nm), Sh])
                                         || {Sh, Nm} <- Top])
           end,
    TopLines = [io_lib:format("| ~p | ~s | ~s |~n",
                              [N, Busy(element(2, proplists:get_value(ec_partitioned, R))),
                               Busy(element(2, proplists:get_value(ec_full, R)))])
                || {N, R} <- Rows],
    MsgHead = "\nMessages per write in the simulator, no faults (operations, acknowledgements "
              "and their retransmissions; 1000 writes spread over the nodes):\n\n"
              "| nodes | partitioned, 3 copies | one copy per node |\n|---|---|---|\n",
    MsgLines = [io_lib:format("| ~p | ~.1f | ~.1f |~n", [N, Fr, Fu]) || {N, Fr, Fu} <- Msgs],
    KvHead = io_lib:format(
               "\nClient latency by replication (DottedDB §V): ~p nodes, ~p fragments of "
               "min(3, n) RAM copies, ~p generators per node, each cycle a get (r 1), a put "
               "with its context (w 1) and an async_ec write of another key, ~p keys; "
               "latencies in µs, every call of the ~p s measured:\n\n"
               "| replication | cycles/s | errors | get p50 / p95 / p99 | put p50 / p95 / p99 | "
               "async_ec write p50 / p95 / p99 | the write, key held here: p50 / p99 | the "
               "write, passed on to a holder: p50 / p99 |\n|---|---|---|---|---|---|---|---|\n",
               [KvNodes, ?KV_F, ?GENS, ?KEYS, Secs]),
    Pct = fun(#{n := 0}) -> "–";
             (#{p50 := A, p95 := B, p99 := D}) -> io_lib:format("~p / ~p / ~p", [A, B, D])
          end,
    Pct2 = fun(#{n := 0}) -> "–";
              (#{p50 := A, p99 := D}) -> io_lib:format("~p / ~p", [A, D])
           end,
    KvLines = [io_lib:format("| ~s | ~p | ~p | ~s | ~s | ~s | ~s | ~s |~n",
                             [Mode, Cy, Er | [Pct(proplists:get_value(Call, Calls))
                                              || Call <- [get, put, write]]
                                          ++ [Pct2(proplists:get_value(Call, Calls))
                                              || Call <- [write_here, write_passed]]])
               || {Mode, #{cycles_per_s := Cy, errors := Er, calls := Calls}} <- Kv],
    ok = file:write_file(Out, unicode:characters_to_binary([Head, Lines, TopHead, TopLines, MsgHead,
                                                           MsgLines, KvHead, KvLines])).

busy_name(Name) when is_atom(Name) -> io_lib:format("`~s`", [Name]);
busy_name({M, F, A}) -> io_lib:format("`~s:~s/~p`", [M, F, A]);
busy_name(Other) -> io_lib:format("`~0p`", [Other]).
