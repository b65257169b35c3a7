%% @doc `make demo-partitioned': a partitioned EC table on five real Erlang nodes. It shows
%% where the ring places the fragments, reads and writes every key from a node that holds
%% only some of them, cuts the network so that some keys have no reachable owner on one side
%% (the writes there are kept as hints and read back at once), heals, takes a node out of the
%% pool and puts it back while a writer runs, and checks after each step that every node reads
%% the same rows. It runs on the project's peer-cluster harness ({@link hm_cluster}), prints
%% each step, and stops the nodes and deletes its directory whatever happens.
%%
%% {@link main/0} is what the make target runs (it halts with status 1 on failure);
%% {@link run/0} returns `ok | {error, Reason}'.
-module(hm_partition_demo).

-export([main/0, run/0]).

-define(TAB, user).
-define(F, 8).
-define(WAIT_MS, 60000).

%% @doc Run the demo; on failure print the reason and halt with status 1.
-spec main() -> ok.
main() ->
    case run() of
        ok -> ok;
        {error, Reason} -> io:format("~nDEMO FAILED: ~tp~n", [Reason]), erlang:halt(1)
    end.

%% @doc Run the demo, printing as it goes.
-spec run() -> ok | {error, term()}.
run() ->
    Dir = filename:join(case os:getenv("TMPDIR") of false -> "/tmp"; T -> T end,
                        lists:concat(["hm_partition_demo_", os:getpid()])),
    try
        io:format("1. Starting five nodes with one Mnesia schema and Hypermnesia.~n"),
        C = hm_cluster:start(#{nodes => 5, dir => Dir, prefix => "hmpd", modules => [?MODULE],
                                log_filter => {hm_partition_demo_netsplit,
                                               {fun hm_cluster:netsplit_filter/2,
                                                ["is gone from this node"]}}}),
        try story(C)
        after hm_cluster:stop(C)
        end
    catch
        throw:{demo_failed, Why} -> {error, Why};
        Class:Reason:Stack -> {error, {Class, Reason, Stack}}
    after
        _ = file:del_dir_r(Dir)
    end.

story(C) ->
    Nodes = hm_cluster:nodes(C),
    io:format("~n2. Creating table ~p: ~p fragments, 3 RAM copies each, on a ring of the "
              "five nodes.~n", [?TAB, ?F]),
    {atomic, ok} = call(C, 1, hypermnesia, create_table,
                        [?TAB, [{type, pawset}, {attributes, [id, name]},
                                {frag_properties, [{n_fragments, ?F}, {n_ram_copies, 3},
                                                   {node_pool, Nodes}]}]]),
    show_placement(C, Nodes),
    Keys = lists:seq(1, 40),
    io:format("~n3. Node 1 writes 40 keys; it holds only some of the fragments.~n"),
    ok = ec(C, 1, fun() -> [mnesia:write({?TAB, K, {v1, K}}) || K <- Keys], ok end),
    Rows1 = [{?TAB, K, {v1, K}} || K <- Keys],
    converged(C, Rows1),
    io:format("   Every node reads the 40 rows, whichever fragments it holds.~n"),
    io:format("   Owners of key 7, the same on every node: ~p~n",
              [short(call(C, 3, hypermnesia, owners, [?TAB, 7]))]),

    io:format("~n4. Cutting nodes 1 and 2 off from nodes 3, 4 and 5.~n"),
    ok = hm_cluster:cut(C, [1, 2], [3, 4, 5]),
    ok = ec(C, 1, fun() -> [mnesia:write({?TAB, K, {left, K}}) || K <- Keys], ok end),
    Left = lists:sort(ec(C, 1, fun() -> [R || K <- Keys, R <- mnesia:read(?TAB, K)] end)),
    #{hints := Hints} = call(C, 1, hypermnesia, info, []),
    io:format("   Node 1 rewrote every key; ~p of the writes had no reachable owner and are "
              "kept as hints.~n   Node 1 reads its own writes: ~s.~n",
              [Hints, yes(Left =:= [{?TAB, K, {left, K}} || K <- Keys])]),
    ok = ec(C, 4, fun() -> mnesia:write({?TAB, 100, right}) end),
    io:format("   Node 4 wrote key 100 on its side.~n"),
    io:format("~n5. Healing. The hints are handed off and the copies converge.~n"),
    ok = hm_cluster:heal(C),
    Rows2 = lists:sort([{?TAB, 100, right} | [{?TAB, K, {left, K}} || K <- Keys]]),
    converged(C, Rows2),
    io:format("   Every node reads the same ~p rows.~n", [length(Rows2)]),

    Node5 = lists:nth(5, Nodes),
    io:format("~n6. Taking node 5 out of the pool and back while node 2 writes.~n"),
    Writer = spawn_link(fun() -> writer(C, 1000) end),
    {atomic, ok} = call(C, 3, hypermnesia, change_table_frag, [?TAB, {del_node, Node5}]),
    io:format("   After del_node:~n"),
    show_placement(C, Nodes),
    {atomic, ok} = call(C, 3, hypermnesia, change_table_frag, [?TAB, {add_node, Node5}]),
    io:format("   After add_node (only the fragments the ring gives back moved):~n"),
    show_placement(C, Nodes),
    Writer ! {stop, self()},
    N = receive {written, W} -> W after ?WAIT_MS -> throw({demo_failed, writer_stuck}) end,
    Rows3 = lists:sort(Rows2 ++ [{?TAB, K, w} || K <- lists:seq(1000, 1000 + N - 1)]),
    converged(C, Rows3),
    io:format("   ~p writes went on during the moves; every node reads all ~p rows.~n",
              [N, length(Rows3)]),
    io:format("~nDemo finished: the partitioned table converged after the cut and the "
              "moves.~n"),
    ok.

writer(C, K) ->
    receive {stop, From} -> From ! {written, K - 1000}
    after 0 ->
            ok = ec(C, 2, fun() -> mnesia:write({?TAB, K, w}) end),
            writer(C, K + 1)
    end.

show_placement(C, Nodes) ->
    Frags = [list_to_atom(atom_to_list(?TAB) ++ case K of 1 -> ""; _ -> "_frag" ++
                                                       integer_to_list(K) end)
             || K <- lists:seq(1, ?F)],
    [io:format("   ~-12s ~s~n", [atom_to_list(F),
                                 string:join([pos(N, Nodes) || N <- lists:sort(
                                     call(C, 1, hm_ec_registry, copy_nodes, [F]))], " ")])
     || F <- Frags],
    ok.

pos(N, Nodes) -> "node" ++ integer_to_list(length(lists:takewhile(fun(X) -> X =/= N end,
                                                                  Nodes)) + 1).

short(Ns) -> [list_to_atom(hd(string:split(atom_to_list(N), "_"))) || N <- Ns].

yes(true) -> "yes";
yes(false) -> throw({demo_failed, own_writes_not_read}).

converged(C, Rows) ->
    try hm_cluster:wait_until(
          fun() -> lists:all(fun(I) -> lists:sort(ec(C, I, fun() ->
                                                                  mnesia:select(?TAB, [{'_', [], ['$_']}])
                                                          end)) =:= Rows
                             end, hm_cluster:ids(C))
          end, ?WAIT_MS)
    catch error:{timeout, _, _} -> throw({demo_failed, not_converged})
    end.

ec(C, I, Fun) -> hm_cluster:call(C, I, hypermnesia, async_ec, [Fun]).

call(C, I, M, F, A) -> hm_cluster:call(C, I, M, F, A).
