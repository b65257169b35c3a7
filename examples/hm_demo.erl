%% @doc `make demo': an eventually consistent Mnesia table on three real Erlang nodes, a real
%% network partition, writes on both sides, and a heal that needs no restart: the scenario of
%% Table 3 and Fig. 4–6 of the paper <em>Hypermnesia: Eventual Consistency in Mnesia</em>
%% (§4.10–4.12), replayed on real nodes.
%%
%% What it does, printing each step in plain sentences:
%% <ol>
%% <li>starts three local nodes with the project's peer-cluster harness ({@link hm_cluster}:
%%     OTP `peer' nodes controlled over standard I/O, so cutting the network between them
%%     never cuts the demo's control), one Mnesia schema for all three under a temporary
%%     directory, and Hypermnesia on each with its default settings;</li>
%% <li>creates a `pawset' (add-wins) table `student' (id, name, year), a RAM copy per node;</li>
%% <li>writes rows from different nodes with {@link hypermnesia:async_ec/1}, shows every
%%     node's copy, and shows that `mnesia:transaction/1' on the EC table is refused and
%%     changes nothing;</li>
%% <li>partitions node 3 away from nodes 1 and 2 for real ({@link hm_cluster:cut/3}: each side
%%     gets a different wrong cookie for the other side, then the links are cut, so traffic
%%     is dropped and reconnection refused); `mnesia:system_info(running_db_nodes)' splits;</li>
%% <li>writes on both sides: node 1 deletes a key that node 3 concurrently rewrites, and nodes
%%     2 and 3 write the same key with different payloads; shows the diverged copies;</li>
%% <li>heals by restoring the cookies, and nothing else ({@link hm_cluster:heal/2} without
%%     waiting): Hypermnesia reconnects the nodes, re-joins Mnesia and resends what each side
%%     missed. The demo waits (polling, with a timeout) until every node shows the same rows
%%     with no operation in flight, checks the outcome (add-wins; the payload conflict settled
%%     by Erlang term order), and shows `running_db_nodes' whole again, with each node's
%%     Mnesia never restarted;</li>
%% <li>stops the nodes and deletes the temporary directory, whatever happened.</li>
%% </ol>
%% {@link main/0} is what `make demo' runs: it halts the VM with status 1 on failure.
%% {@link run/0} is the same story returning `ok | {error, Reason}' (test/hm_demo_SUITE runs
%% it). The CRDT library on its own, in one process, is {@link hm_crdt_demo}. Demos live in
%% `examples/', outside the application: they start peer nodes.
-module(hm_demo).

-export([main/0, run/0]).

-define(TAB, student).
-define(IDS, [1, 2, 3]).
-define(WAIT_MS, 20000).     % one wait-until
-define(COL, 22).            % width of a node's column

%% @doc Run the demo for `make demo'; on failure print the reason and halt with status 1.
-spec main() -> ok.
main() ->
    case run() of
        ok -> ok;
        {error, Reason} ->
            io:format("~nDEMO FAILED: ~tp~n", [Reason]),
            erlang:halt(1)
    end.

%% @doc Run the whole demo, printing as it goes: `ok' once the three nodes have converged to
%% the expected rows after the heal. The nodes are stopped and the temporary directory (Mnesia
%% directories and node logs) deleted in every case.
-spec run() -> ok | {error, term()}.
run() ->
    T0 = now_ms(),
    Dir = filename:join(tmp_root(), lists:concat(["hm_demo_", os:getpid(), "_",
                                                  erlang:unique_integer([positive])])),
    Result = try
                 %% (if the start fails, hm_cluster stops the nodes it started)
                 C = start_cluster(Dir),
                 try story(C)
                 after
                     io:format("~n7. Stopping the three nodes and deleting ~ts.~n", [Dir]),
                     hm_cluster:stop(C)
                 end
             catch
                 throw:{demo_failed, Reason} -> {error, Reason};
                 Class:Reason:Stack -> {error, {Class, Reason, Stack}}
             after
                 %% hm_cluster keeps a directory it was given
                 _ = file:del_dir_r(Dir)
             end,
    case Result of
        ok -> io:format("~nDemo finished in ~s: the three nodes converged.~n",
                        [secs(now_ms() - T0)]);
        _ -> ok
    end,
    Result.

%%% ------------------------------------------------------------- the story

story(C) ->
    Before = [call(C, I, erlang, whereis, [mnesia_sup]) || I <- ?IDS],

    io:format("~n2. Node 1 creates table student (id, name, year) as a pawset (add-wins) EC "
              "table,~n   with a RAM copy on every node:~n"
              "     hypermnesia:create_table(student, [{type, pawset}, "
              "{attributes, [id, name, year]},~n"
              "                                        {ram_copies, [Node1, Node2, Node3]}])~n"),
    expect(create_table, {atomic, ok},
           call(C, 1, hypermnesia, create_table,
                [?TAB, [{type, pawset}, {attributes, [id, name, year]},
                        {ram_copies, hm_cluster:nodes(C)}]])),

    io:format("~n3. Each node writes a row with plain Mnesia code inside "
              "hypermnesia:async_ec/1~n   (applied locally at once, then broadcast to the "
              "other copies):~n"),
    write(C, 1, {?TAB, 1, <<"Ada">>, 1}, ""),
    write(C, 2, {?TAB, 2, <<"Grace">>, 2}, ""),
    write(C, 3, {?TAB, 3, <<"Alan">>, 3}, ""),
    Initial = [{?TAB, 1, <<"Ada">>, 1}, {?TAB, 2, <<"Grace">>, 2}, {?TAB, 3, <<"Alan">>, 3}],
    {_, Views3} = settle(C),
    expect(initial_rows, [Initial, Initial, Initial], Views3),
    io:format("   Every node's copy of student:~n"),
    show(Views3),
    Tx = call(C, 1, mnesia, transaction, [fun() -> mnesia:write({?TAB, 1, <<"Tx">>, 9}) end]),
    expect(transaction_refused, {aborted, {no_exists, ?TAB}}, Tx),
    expect(transaction_changed_nothing, [Initial, Initial, Initial], views(C)),
    io:format("   An EC table is not for mnesia:transaction/1: on node 1~n"
              "     mnesia:transaction(fun() -> mnesia:write({student, 1, <<\"Tx\">>, 9}) end)~n"
              "   returns ~p and changes nothing.~n", [Tx]),

    io:format("~n4. Partition: node 3 is cut off from nodes 1 and 2. Each side gets a different "
              "wrong~n   cookie for the other side, then the links are cut: traffic is dropped "
              "and~n   reconnection refused.~n"),
    ok = hm_cluster:cut(C, [1, 2], [3]),
    [N1, N2, N3] = hm_cluster:nodes(C),
    wait_until(mnesia_split,
               fun() -> running(C) =:= [[N1, N2], [N1, N2], [N3]] orelse running(C) end),
    io:format("   node 3 pings node 1: ~p (node 1 refuses the handshake)~n",
              [call(C, 3, net_adm, ping, [N1])]),
    io:format("   mnesia:system_info(running_db_nodes) on each node:~n"),
    show_running(C),

    io:format("~n5. Both sides keep writing (none of these calls blocks or fails):~n"),
    delete(C, 1, 2, ""),
    write(C, 3, {?TAB, 2, <<"Grace">>, 3}, "concurrent with node 1's delete of id 2"),
    write(C, 2, {?TAB, 1, <<"Ada Byron">>, 1}, ""),
    write(C, 3, {?TAB, 1, <<"Ada Lovelace">>, 1},
          "concurrent with node 2's write of id 1, another payload"),
    write(C, 2, {?TAB, 4, <<"Edsger">>, 1}, ""),
    write(C, 3, {?TAB, 5, <<"Barbara">>, 2}, ""),
    SideA = [{?TAB, 1, <<"Ada Byron">>, 1}, {?TAB, 3, <<"Alan">>, 3},
             {?TAB, 4, <<"Edsger">>, 1}],
    SideB = [{?TAB, 1, <<"Ada Lovelace">>, 1}, {?TAB, 2, <<"Grace">>, 3},
             {?TAB, 3, <<"Alan">>, 3}, {?TAB, 5, <<"Barbara">>, 2}],
    wait_until(sides_applied,
               fun() -> V = views(C), V =:= [SideA, SideA, SideB] orelse V end),
    io:format("   Every node's copy: nodes 1 and 2 agree, node 3 has its own history:~n"),
    show(views(C)),

    io:format("~n6. Heal: the right cookies are restored, and that is all the demo does. "
              "Hypermnesia~n   reconnects the nodes, makes Mnesia run as one cluster again and "
              "resends what~n   each side missed. Waiting until every node shows the same rows, "
              "with no operation~n   still in flight...~n"),
    T = now_ms(),
    ok = hm_cluster:heal(C, #{wait => false}),
    {Running, Views6} = settle(C),
    io:format("   Converged ~s after the heal. Every node's copy:~n", [secs(now_ms() - T)]),
    show(Views6),
    Final = [{?TAB, 1, <<"Ada Lovelace">>, 1}, {?TAB, 2, <<"Grace">>, 3},
             {?TAB, 3, <<"Alan">>, 3}, {?TAB, 4, <<"Edsger">>, 1},
             {?TAB, 5, <<"Barbara">>, 2}],
    expect(converged_rows, [Final, Final, Final], Views6),
    io:format(
      "   Why these rows:~n"
      "     id 2: node 1's delete and node 3's rewrite were concurrent (neither had seen the~n"
      "           other). pawset is add-wins: a delete removes only the writes it has seen,~n"
      "           so the rewrite survives. (In a prwset table the delete would win.)~n"
      "     id 1: two concurrent writes with different payloads. The conflict policy~n"
      "           (term_order, the default) keeps the greater record in Erlang term order,~n"
      "           ~p > ~p,~n"
      "           the same choice on every node, with no coordination.~n"
      "     ids 4 and 5: written on one side only, now on every node.~n",
      [{?TAB, 1, <<"Ada Lovelace">>, 1}, {?TAB, 1, <<"Ada Byron">>, 1}]),
    Whole = lists:sort(hm_cluster:nodes(C)),
    expect(running_db_nodes_whole, [Whole, Whole, Whole], Running),
    io:format("   mnesia:system_info(running_db_nodes) on each node, whole again:~n"),
    show_running(C),
    After = [call(C, I, erlang, whereis, [mnesia_sup]) || I <- ?IDS],
    expect(mnesia_not_restarted, Before, After),
    Rejoins = [maps:get(mnesia_rejoins, call(C, I, hm_membership, status, [])) || I <- ?IDS],
    io:format("   No restart: on every node Mnesia's supervisor is the same process as before "
              "the~n   partition. Mnesia re-joins made by Hypermnesia's membership server on "
              "nodes 1, 2, 3:~n   ~s.~n",
              [lists:join(", ", [integer_to_list(R) || R <- Rejoins])]),
    ok.

%%% ------------------------------------------------------------- cluster

start_cluster(Dir) ->
    io:format("~nHypermnesia demo: an eventually consistent Mnesia table on three real Erlang "
              "nodes,~na real network partition, writes on both sides, and a heal without "
              "restarts.~n"),
    io:format("~n1. Starting three Erlang nodes with OTP's peer module. The demo controls them "
              "over~n   standard I/O, so cutting the network between them never cuts the "
              "demo's control.~n"
              "   One Mnesia schema for the three nodes (under ~ts), then Mnesia and~n"
              "   Hypermnesia on each node.~n", [Dir]),
    C = hm_cluster:start(#{nodes => 3, dir => Dir, prefix => "demo",
                           %% the nodes run funs written here
                           modules => [?MODULE],
                           %% Hypermnesia's own settings, as a user gets them
                           app_env => [],
                           log_filter => {hm_demo_netsplit,
                                          {fun hm_cluster:netsplit_filter/2, []}}}),
    [io:format("     node ~p = ~p~n", [I, N]) || {I, N} <- lists:zip(?IDS, hm_cluster:nodes(C))],
    Whole = lists:sort(hm_cluster:nodes(C)),
    expect(mnesia_running, [Whole, Whole, Whole], running(C)),
    io:format("   Mnesia runs on all three nodes, as one cluster. (The nodes' log reports "
              "about the~n   coming netsplit, refused connections and Mnesia's "
              "inconsistent_database alarms,~n   are left out of this output.)~n"),
    C.

%% Wait until Mnesia runs as one cluster, every node shows the same rows, and no operation is
%% buffered or unstable anywhere (every operation delivered everywhere).
settle(C) ->
    Whole = lists:sort(hm_cluster:nodes(C)),
    wait_until(convergence,
               fun() ->
                       R = running(C),
                       V = views(C),
                       Quiet = [quiet(C, I) || I <- ?IDS],
                       (lists:all(fun(X) -> X =:= Whole end, R)
                        andalso length(lists:usort(V)) =:= 1
                        andalso lists:all(fun(Q) -> Q end, Quiet))
                           orelse {R, V, Quiet}
               end),
    {running(C), views(C)}.

quiet(C, I) ->
    #{buffered_ops := B, unstable_ops := U} = call(C, I, hypermnesia, info, [?TAB]),
    B =:= 0 andalso U =:= 0.

running(C) -> [lists:sort(call(C, I, mnesia, system_info, [running_db_nodes])) || I <- ?IDS].

views(C) -> [contents(C, I) || I <- ?IDS].

contents(C, I) ->
    lists:sort(call(C, I, hypermnesia, async_ec,
                    [fun() -> mnesia:select(?TAB, [{'_', [], ['$_']}]) end])).

write(C, I, Rec, Note) ->
    say(I, io_lib:format("mnesia:write(~p)", [Rec]), Note),
    expect({write, I, Rec}, ok,
           call(C, I, hypermnesia, async_ec, [fun() -> mnesia:write(Rec) end])).

delete(C, I, Key, Note) ->
    say(I, io_lib:format("mnesia:delete(~p)", [{?TAB, Key}]), Note),
    expect({delete, I, Key}, ok,
           call(C, I, hypermnesia, async_ec, [fun() -> mnesia:delete({?TAB, Key}) end])).

say(I, Call, "") -> io:format("     node ~p: ~s~n", [I, Call]);
say(I, Call, Note) -> io:format("     node ~p: ~s~n             ^ ~s~n", [I, Call, Note]).

call(C, I, M, F, A) -> hm_cluster:call(C, I, M, F, A).

%%% ------------------------------------------------------------- output

%% One row per id, one column per node; rows the nodes disagree on are marked.
show(Views) ->
    Ids = lists:usort([element(2, R) || V <- Views, R <- V]),
    line("     ~-4s~ts", ["id", [pad("node " ++ integer_to_list(I)) || I <- ?IDS]]),
    lists:foreach(
      fun(Id) ->
              Cells = [cell(Id, V) || V <- Views],
              Mark = case lists:usort(Cells) of
                         [_] -> "";
                         _ -> "<- differs"
                     end,
              line("     ~-4w~ts~s", [Id, [pad(X) || X <- Cells], Mark])
      end, Ids).

cell(Id, View) ->
    case lists:keyfind(Id, 2, View) of
        {?TAB, Id, Name, Year} -> io_lib:format("~ts, year ~p", [Name, Year]);
        false -> "-"
    end.

pad(S) -> string:pad(lists:flatten(S), ?COL).

line(Format, Args) -> io:format("~ts~n", [string:trim(io_lib:format(Format, Args), trailing)]).

show_running(C) ->
    Nodes = hm_cluster:nodes(C),
    Label = fun(N) -> "node " ++ integer_to_list(index(N, Nodes)) end,
    lists:foreach(fun({I, R}) ->
                          io:format("     node ~p: ~s~n",
                                    [I, lists:join(", ", [Label(N) || N <- R])])
                  end, lists:zip(?IDS, running(C))).

index(N, Nodes) -> length(lists:takewhile(fun(X) -> X =/= N end, Nodes)) + 1.

%%% ------------------------------------------------------------- helpers

%% Poll `F' until it returns `true'; after ?WAIT_MS fail with what it returned last.
wait_until(What, F) ->
    try hm_cluster:wait_until(F, ?WAIT_MS)
    catch error:{timeout, _, Last} -> fail({timeout, What, {last_seen, Last}})
    end.

expect(_What, X, X) -> ok;
expect(What, Expected, Got) -> fail({What, {expected, Expected}, {got, Got}}).

-spec fail(term()) -> no_return().
fail(Reason) -> throw({demo_failed, Reason}).

now_ms() -> erlang:monotonic_time(millisecond).

secs(Ms) -> io_lib:format("~.1f s", [Ms / 1000]).

tmp_root() ->
    case os:getenv("TMPDIR") of
        false -> "/tmp";
        "" -> "/tmp";
        D -> D
    end.
