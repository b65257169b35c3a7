%% @doc `make bench-partition-memory': what a partition costs in memory, for the production
%% notes (docs/guide/10-production.md). Two peer nodes (test/hm_cluster.erl, nodes named
%% `pmem<I>_<os pid>') hold a `pawset' `ram_copies' table; node 2 is cut off; node 1 writes
%% `Ops' operations (records holding a distinct 100-byte binary each) over `Keys' keys, and
%% reports after every step: operations in the retransmission log and keys with metadata
%% (`hypermnesia:info/1'), the memory of node 1 (`erlang:memory(total)') and of the table's
%% process, and the growth of node 1's memory per operation since the previous step (the
%% table itself stops growing once every key is written). Then the cut is healed and the run
%% reports how long until the log is empty on both nodes.
-module(hm_partition_memory).

-export([main/1]).

-define(STEP, 20000).

%% @doc `main([Ops, Keys])' (strings), e.g. `["100000", "10000"]'.
-spec main([string()]) -> no_return().
main([OpsS, KeysS]) ->
    Ops = list_to_integer(OpsS),
    Keys = list_to_integer(KeysS),
    C = hm_cluster:start(#{nodes => 2, prefix => "pmem", modules => [?MODULE]}),
    try
        Nodes = hm_cluster:nodes(C),
        {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                       [t, [{type, pawset}, {attributes, [k, v]},
                                            {ram_copies, Nodes}]]),
        ok = hm_cluster:cut(C, [1], [2]),
        io:format("| operations written | unstable_ops | unstable_keys | node memory (MB) | "
                  "table process (MB) | growth per operation (bytes) |~n"
                  "|---|---|---|---|---|---|~n"),
        Rows = lists:foldl(
                 fun(Done, Acc = [{_, Prev, _} | _]) ->
                         From = Done - ?STEP + 1,
                         ok = hm_cluster:eval(C, 1, fun() -> write(From, Done, Keys) end),
                         [report(C, Done, Prev) | Acc]
                 end, [{0, node_memory(C), 0}], lists:seq(?STEP, Ops, ?STEP)),
        [{Last, LastTotal, LastServer}, _ | _] = Rows,
        {First, FirstTotal, FirstServer} = lists:nth(length(Rows) - 1, Rows),
        io:format("~nfrom ~b to ~b operations: node memory grew ~b bytes per operation, the "
                  "table's process ~b~n",
                  [First, Last, (LastTotal - FirstTotal) div (Last - First),
                   (LastServer - FirstServer) div (Last - First)]),
        T0 = erlang:monotonic_time(millisecond),
        ok = hm_cluster:heal(C),
        Empty = fun() -> [0, 0] =:= [maps:get(unstable_ops, hm_cluster:call(C, I, hypermnesia,
                                                                            info, [t]))
                                     || I <- [1, 2]] end,
        ok = hm_cluster:wait_until(Empty, 300000),
        io:format("~nhealed: logs empty on both nodes ~b ms after the heal began "
                  "(reconnection included)~n", [erlang:monotonic_time(millisecond) - T0])
    after
        hm_cluster:stop(C)
    end,
    halt(0).

write(From, To, Keys) ->
    Pad = binary:copy(<<"x">>, 96),
    lists:foreach(fun(I) ->
                          ok = hypermnesia:async_ec(fun() ->
                                                            mnesia:write({t, I rem Keys,
                                                                          <<I:32, Pad/binary>>})
                                                    end)
                  end, lists:seq(From, To)).

node_memory(C) ->
    hm_cluster:call(C, 1, erlang, garbage_collect, []),
    hm_cluster:call(C, 1, erlang, memory, [total]).

report(C, Done, Prev) ->
    #{unstable_ops := U, unstable_keys := K} = hm_cluster:call(C, 1, hypermnesia, info, [t]),
    Total = node_memory(C),
    Server = hm_cluster:eval(C, 1, fun() ->
                                           Pid = whereis(hm_ec_table_server:name(t)),
                                           erlang:garbage_collect(Pid),
                                           {memory, M} = process_info(Pid, memory),
                                           M
                                   end),
    io:format("| ~b | ~b | ~b | ~.1f | ~.1f | ~b |~n",
              [Done, U, K, Total / 1048576, Server / 1048576, (Total - Prev) div ?STEP]),
    {Done, Total, Server}.
