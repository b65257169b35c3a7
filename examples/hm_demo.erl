%% @doc `make demo': an eventually consistent Mnesia table on three real Erlang nodes, a real
%% network partition, writes on both sides, and a heal that needs no restart (seed 000,
%% §4.10–4.12; the scenario of Table 3 / Fig. 4–6, replayed on real nodes).
%%
%% What it does, printing each step in plain sentences:
%% <ol>
%% <li>starts three local nodes with OTP's `peer', controlled over standard I/O (so cutting the
%%     network between them never cuts the demo's control), creates one Mnesia schema for all
%%     three under a temporary directory, and starts Hypermnesia on each;</li>
%% <li>creates a `pawset' (add-wins) table `student' (id, name, year), a RAM copy per node;</li>
%% <li>writes rows from different nodes with {@link hypermnesia:async_ec/1} and shows every
%%     node's copy;</li>
%% <li>partitions node 3 away from nodes 1 and 2 for real: each side gets a different wrong
%%     cookie for the other side, then the links are cut, so traffic is dropped and
%%     reconnection refused; `mnesia:system_info(running_db_nodes)' splits;</li>
%% <li>writes on both sides: node 1 deletes a key that node 3 concurrently rewrites, and nodes
%%     2 and 3 write the same key with different payloads; shows the diverged copies;</li>
%% <li>heals by restoring the cookies, and nothing else: Hypermnesia reconnects the nodes,
%%     re-joins Mnesia and resends what each side missed. It waits (polling, with a timeout)
%%     until every node shows the same rows with no operation in flight, checks the outcome
%%     (add-wins; the payload conflict settled by Erlang term order), and shows
%%     `running_db_nodes' whole again, with each node's Mnesia never restarted;</li>
%% <li>stops the nodes and deletes the temporary directory, whatever happened.</li>
%% </ol>
%% {@link main/0} is what `make demo' runs: it halts the VM with status 1 on failure.
%% {@link run/0} is the same story returning `ok | {error, Reason}' (test/hm_demo_SUITE runs
%% it). The CRDT library on its own, in one process, is {@link hm_crdt_demo}.
-module(hm_demo).

-export([main/0, run/0]).

-define(TAB, student).
-define(IDS, [1, 2, 3]).
-define(CALL_MS, 15000).     % one call to a node
-define(WAIT_MS, 20000).     % one wait-until
-define(POLL_MS, 100).
-define(COL, 22).            % width of a node's column
-define(PEERS, hm_demo_peers).

-type ctx() :: #{peers := [pid()], nodes := [node()]}.

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
%% the expected rows after the heal. The nodes are stopped and the temporary Mnesia
%% directories deleted in every case.
-spec run() -> ok | {error, term()}.
run() ->
    T0 = now_ms(),
    Dir = filename:join(tmp_root(), lists:concat(["hm_demo_", os:getpid(), "_",
                                                  erlang:unique_integer([positive])])),
    put(?PEERS, []),
    Result = try story(Dir)
             catch
                 throw:{demo_failed, Reason} -> {error, Reason};
                 Class:Reason:Stack -> {error, {Class, Reason, Stack}}
             after
                 cleanup(Dir)
             end,
    case Result of
        ok -> io:format("~nDemo finished in ~s: the three nodes converged.~n",
                        [secs(now_ms() - T0)]);
        _ -> ok
    end,
    Result.

%%% ------------------------------------------------------------- the story

story(Dir) ->
    io:format("~nHypermnesia demo: an eventually consistent Mnesia table on three real Erlang "
              "nodes,~na real network partition, writes on both sides, and a heal without "
              "restarts.~n"),
    C = start_cluster(Dir),
    Before = [call(C, I, erlang, whereis, [mnesia_sup]) || I <- ?IDS],

    io:format("~n2. Node 1 creates table student (id, name, year) as a pawset (add-wins) EC "
              "table,~n   with a RAM copy on every node:~n"
              "     hypermnesia:create_table(student, [{type, pawset}, "
              "{attributes, [id, name, year]},~n"
              "                                        {ram_copies, [Node1, Node2, Node3]}])~n"),
    expect(create_table, {atomic, ok},
           call(C, 1, hypermnesia, create_table,
                [?TAB, [{type, pawset}, {attributes, [id, name, year]},
                        {ram_copies, maps:get(nodes, C)}]])),

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
    partition(C, [1, 2], [3]),
    [N1, N2, N3] = maps:get(nodes, C),
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
    heal(C),
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
    Whole = lists:sort(maps:get(nodes, C)),
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
    io:format("~n1. Starting three Erlang nodes with OTP's peer module. The demo controls them "
              "over~n   standard I/O, so cutting the network between them never cuts the "
              "demo's control.~n"),
    _ = os:cmd("epmd -daemon"),
    expect(make_dir, ok, file:make_dir(Dir)),
    %% the nodes run funs written here, so they need this module's directory too
    Paths = lists:append([["-pa", filename:absname(filename:dirname(code:which(M)))]
                          || M <- lists:usort([hypermnesia, ?MODULE])]),
    Cookie = [["-setcookie", "hm_demo_" ++ os:getpid()] || not is_alive()],
    Peers = [start_peer(I, Dir, Paths ++ lists:append(Cookie)) || I <- ?IDS],
    C = #{peers => [P || {P, _} <- Peers], nodes => [N || {_, N} <- Peers]},
    [io:format("     node ~p = ~p~n", [I, N]) || {I, {_, N}} <- lists:zip(?IDS, Peers)],
    Nodes = maps:get(nodes, C),
    [expect({ping, N}, pong, call(C, 1, net_adm, ping, [N])) || N <- tl(Nodes)],
    io:format("   Creating one Mnesia schema for the three nodes (under ~ts),~n"
              "   then starting Mnesia and Hypermnesia on each node.~n", [Dir]),
    expect(create_schema, ok, call(C, 1, mnesia, create_schema, [Nodes])),
    Filter = {fun netsplit_filter/2, []},
    [expect(log_filter, ok, call(C, I, logger, add_primary_filter, [hm_demo_netsplit, Filter]))
     || I <- ?IDS],
    [begin
         expect(load, ok, call(C, I, application, load, [hypermnesia])),
         expect({start, I}, ok, call(C, I, hypermnesia, start, []))
     end || I <- ?IDS],
    Sorted = lists:sort(Nodes),
    wait_until(mnesia_running,
               fun() -> R = running(C), lists:all(fun(X) -> X =:= Sorted end, R) orelse R end),
    io:format("   Mnesia runs on all three nodes, as one cluster. (The nodes' log reports "
              "about the~n   coming netsplit, refused connections and Mnesia's "
              "inconsistent_database alarms,~n   are left out of this output.)~n"),
    C.

start_peer(I, Dir, Args) ->
    Name = list_to_atom(lists:concat(["demo", I, "_", os:getpid()])),
    MnesiaDir = "\"" ++ filename:join(Dir, atom_to_list(Name)) ++ "\"",
    case peer:start(#{name => Name, connection => standard_io,
                      args => Args ++ ["-connect_all", "false",
                                       "-kernel", "prevent_overlapping_partitions", "false",
                                       "-mnesia", "dir", MnesiaDir]}) of
        {ok, P, N} -> put(?PEERS, [P | get(?PEERS)]), {P, N};
        Error -> fail({start_node, I, Error})
    end.

cleanup(Dir) ->
    Peers = case erase(?PEERS) of undefined -> []; Ps -> Ps end,
    io:format("~n7. Stopping the three nodes and deleting ~ts.~n", [Dir]),
    _ = [catch peer:stop(P) || P <- Peers],
    _ = file:del_dir_r(Dir),
    ok.

%% Give each side a wrong cookie for the other, different per side, and cut the links.
partition(C, Side1, Side2) ->
    Cut = fun(I) -> list_to_atom("cut" ++ integer_to_list(I)) end,
    [begin
         set_cookie(C, I, J, Cut(I)),
         true = call(C, I, erlang, disconnect_node, [node_n(C, J)])
     end || I <- Side1, J <- Side2],
    [set_cookie(C, J, I, Cut(J)) || I <- Side1, J <- Side2],
    wait_until(links_cut,
               fun() ->
                       lists:all(fun({I, J}) ->
                                         not lists:member(node_n(C, J),
                                                          call(C, I, erlang, nodes, []))
                                 end, [{I, J} || I <- Side1, J <- Side2])
               end).

%% Restore the cookies. Reconnecting is left to Hypermnesia.
heal(C) ->
    Cookie = call(C, 1, erlang, get_cookie, []),
    [set_cookie(C, I, J, Cookie) || I <- ?IDS, J <- ?IDS, I =/= J],
    ok.

set_cookie(C, I, J, Cookie) ->
    true = call(C, I, erlang, set_cookie, [node_n(C, J), Cookie]),
    ok.

%% Wait until Mnesia runs as one cluster, every node shows the same rows, and no operation is
%% buffered or unstable anywhere (every operation delivered everywhere).
settle(C) ->
    Whole = lists:sort(maps:get(nodes, C)),
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

%% Runs on the nodes as a logger primary filter: drops the reports a netsplit is expected to
%% cause (refused connections, Mnesia's inconsistent_database), passes everything else.
netsplit_filter(Event = #{msg := Msg}, _) ->
    Text = try
               case Msg of
                   {string, S} -> S;
                   {report, R} -> io_lib:format("~0p", [R]);
                   {F, A} -> io_lib:format(F, A)
               end
           catch _:_ -> ""
           end,
    Expected = [P || P <- ["inconsistent_database", "Connection attempt from node"],
                     string:find(Text, P) =/= nomatch],
    case Expected of
        [] -> Event;
        _ -> stop
    end.

-spec call(ctx(), 1..3, module(), atom(), list()) -> term().
call(#{peers := Peers}, I, M, F, A) -> peer:call(lists:nth(I, Peers), M, F, A, ?CALL_MS).

node_n(#{nodes := Nodes}, I) -> lists:nth(I, Nodes).

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
    Nodes = maps:get(nodes, C),
    Label = fun(N) -> "node " ++ integer_to_list(index(N, Nodes)) end,
    lists:foreach(fun({I, R}) ->
                          io:format("     node ~p: ~s~n",
                                    [I, lists:join(", ", [Label(N) || N <- R])])
                  end, lists:zip(?IDS, running(C))).

index(N, Nodes) -> length(lists:takewhile(fun(X) -> X =/= N end, Nodes)) + 1.

%%% ------------------------------------------------------------- helpers

%% Poll `F' until it returns `true'; after ?WAIT_MS fail with what it returned last.
wait_until(What, F) -> wait_until(What, F, now_ms() + ?WAIT_MS).

wait_until(What, F, Deadline) ->
    case F() of
        true -> ok;
        Last ->
            case now_ms() > Deadline of
                true -> fail({timeout, What, {last_seen, Last}});
                false -> timer:sleep(?POLL_MS), wait_until(What, F, Deadline)
            end
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
