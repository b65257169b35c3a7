%% @doc EC tables on three real nodes (OTP `peer'), with real partitions, on the shared
%% cluster harness {@link hm_cluster}.
%%
%% Peers are controlled over standard I/O, not distribution, so cutting the nodes' links never
%% cuts the test's control. A partition gives each side a wrong cookie for the other side
%% (different on each side, so the handshake fails both ways) and disconnects: traffic is
%% dropped and reconnection refused until the heal restores the cookies. Nothing in the test
%% reconnects the nodes or Mnesia: Hypermnesia does it by itself. Cases that need a fourth
%% node add it with hm_cluster:add_node/1 and remove it again before they end.
-module(hm_ec_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([catch_up_by_state/1, catch_up_by_partial_state/1, step_diagnostic/1,
         dead_node_leaves_a_table/1, dead_node_with_its_schema_in_ram_leaves_a_table/1]).
-export([write_everywhere_read_everywhere/1, queries/1, partition_add_wins/1,
         partition_remove_wins/1, quiescent_metadata/1, conflict_policies/1, sync_ec/1,
         bad_input/1, non_ec_tables_untouched/1, new_copy_and_restart/1, disc_kill_restart/1,
         clear_remove_wins/1, transient_reorder/1, transactions_refused/1,
         other_table_instance/1, partition_under_full_load/1, mnesia_restart_ram_copy/1,
         bad_records_as_mnesia/1, without_application/1, create_table_not_db_node/1,
         restore_backup/1, transactions_refused_across_events/1, table_events/1,
         copy_stopped_under_write/1, storage_gone_under_the_process/1]).
-export([load_writers/4, digest/1, subscribe_events/1, events/0, stop_copy_under_write/2]).
-export([log/2, delete_under_the_process/1]).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [write_everywhere_read_everywhere, queries, table_events, partition_add_wins,
          partition_remove_wins, catch_up_by_state, catch_up_by_partial_state,
          quiescent_metadata, conflict_policies, sync_ec, bad_input, bad_records_as_mnesia,
          transactions_refused, transactions_refused_across_events, other_table_instance,
          without_application, copy_stopped_under_write, storage_gone_under_the_process,
          create_table_not_db_node,
          restore_backup,
          non_ec_tables_untouched,
          clear_remove_wins, transient_reorder,
          new_copy_and_restart, dead_node_leaves_a_table,
          dead_node_with_its_schema_in_ram_leaves_a_table, disc_kill_restart,
          partition_under_full_load,
          mnesia_restart_ram_copy, step_diagnostic].

%%% ------------------------------------------------------------- cluster

init_per_suite(Config) ->
    %% this suite's funs run on the nodes
    C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config), prefix => "hm",
                           modules => [?MODULE]}),
    [{cluster, C} | Config].

end_per_suite(Config) ->
    hm_cluster:stop(?config(cluster, Config)).

init_per_testcase(Case, Config) -> [{tab, Case} | Config].

end_per_testcase(_Case, Config) ->
    %% a case may stop Mnesia or the application on a node: start them again first
    [begin
         _ = call(I, Config, mnesia, start, []),
         _ = call(I, Config, hypermnesia, start, [])
     end || I <- [1, 2, 3]],
    heal(Config),
    Tab = ?config(tab, Config),
    _ = call(1, Config, hypermnesia, delete_table, [Tab]),
    %% helper tables left behind by a table deleted outside hypermnesia (a failed case)
    _ = [call(1, Config, mnesia, delete_table, [H])
         || H <- [list_to_atom(P ++ atom_to_list(Tab)) || P <- ["hm_meta_", "hm_log_"]]],
    ok.

call(I, Config, M, F, A) -> hm_cluster:call(?config(cluster, Config), I, M, F, A).

node_n(I, Config) -> hm_cluster:node(?config(cluster, Config), I).

%% The three nodes every case starts with (a fourth one a case adds is gone when it ends).
nodes3(Config) -> [node_n(I, Config) || I <- [1, 2, 3]].

ec(I, Config, Fun) -> call(I, Config, hypermnesia, async_ec, [Fun]).

create(Config, Opts) ->
    Tab = ?config(tab, Config),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{attributes, [id, name, year]},
                               {ram_copies, nodes3(Config)} | Opts]]),
    %% every copy has caught up (a new table's copies release each other within a tick)
    wait_until(fun() -> lists:all(fun(I) -> ready(I, Config, Tab) end, [1, 2, 3]) end),
    Tab.

ready(I, Config, Tab) ->
    case call(I, Config, hypermnesia, info, [Tab]) of
        #{status := ready} -> true;
        _ -> false
    end.

%% A partition (each side gets a wrong cookie for the other, links cut) and its heal, which
%% leaves reconnecting (nodes, then Mnesia) to Hypermnesia and waits for it: hm_cluster.
partition(Side1, Side2, Config) -> hm_cluster:cut(?config(cluster, Config), Side1, Side2).

heal(Config) -> hm_cluster:heal(?config(cluster, Config)).

wait_until(F) -> wait_until(F, 200).

%% At most N tenths of a second.
wait_until(F, N) -> hm_cluster:wait_until(F, N * 100).

contents(I, Config, Tab) ->
    lists:sort(ec(I, Config, fun() -> mnesia:select(Tab, [{'_', [], ['$_']}]) end)).

converged(Config, Tab) ->
    wait_until(fun() -> length(lists:usort([contents(I, Config, Tab) || I <- [1, 2, 3]])) =:= 1
               end),
    contents(1, Config, Tab).

%%% ------------------------------------------------------------- cases

%% The diagnostic of a table's steps (`slow_step_ms', read when the table's process starts):
%% off, `info' shows neither `slow_steps' nor `step_totals'; on, every write made on the node
%% is a `submit' step, the other copies' writes arrive as `ops' steps, and a step at least
%% that long is kept.
step_diagnostic(Config) ->
    Off = create(Config, [{type, pawset}]),
    false = maps:is_key(step_totals, call(1, Config, hypermnesia, info, [Off])),
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Off]),
    [ok = call(I, Config, application, set_env, [hypermnesia, slow_step_ms, 1])
     || I <- [1, 2, 3]],
    try
        Tab = create(Config, [{type, pawset}]),
        ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, x, K}) || K <- lists:seq(1, 50)], ok end),
        ok = ec(2, Config, fun() -> [mnesia:write({Tab, K, y, K}) || K <- lists:seq(51, 60)], ok end),
        60 = length(converged(Config, Tab)),
        #{step_totals := #{submit := {50, Us, Reds}} = T1, slow_steps := Slow} =
            call(1, Config, hypermnesia, info, [Tab]),
        true = Us >= 0 andalso Reds > 0 andalso is_list(Slow),
        {N2, _, _} = maps:get(ops, T1),
        true = N2 >= 1,
        #{step_totals := #{submit := {10, _, _}}} = call(2, Config, hypermnesia, info, [Tab]),
        #{step_totals := T3} = call(3, Config, hypermnesia, info, [Tab]),
        false = maps:is_key(submit, T3),
        true = maps:is_key(ops, T3),
        %% every step kept took at least the limit
        [true = Ms >= 1 andalso is_atom(K) || {K, _, Ms, _} <- Slow],
        ok
    after
        [call(I, Config, application, unset_env, [hypermnesia, slow_step_ms]) || I <- [1, 2, 3]]
    end.

write_everywhere_read_everywhere(Config) ->
    Tab = create(Config, [{type, pawset}]),
    [ok = ec(I, Config, fun() -> mnesia:write({Tab, I, node(), 2000 + I}) end) || I <- [1, 2, 3]],
    Expected = [{Tab, I, node_n(I, Config), 2000 + I} || I <- [1, 2, 3]],
    Expected = converged(Config, Tab),
    [[{Tab, 2, _, 2002}] = ec(I, Config, fun() -> mnesia:read(Tab, 2) end) || I <- [1, 2, 3]],
    ok.

queries(Config) ->
    Tab = create(Config, [{type, pawset}, {index, [year]}]),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, K * 10, K rem 3}) || K <- lists:seq(1, 30)],
                                ok end),
    30 = length(converged(Config, Tab)),
    %% on another node than the writer
    10 = length(ec(3, Config, fun() -> mnesia:index_read(Tab, 0, year) end)),
    10 = length(ec(3, Config, fun() -> mnesia:index_match_object({Tab, '_', '_', 1}, year) end)),
    {First, Cont} = ec(3, Config, fun() -> mnesia:select(Tab, [{{Tab, '$1', '_', '_'}, [], ['$1']}], 7, read) end),
    Rest = ec(3, Config, fun() -> collect(mnesia:select(Cont), []) end),
    Keys = lists:sort(First ++ Rest),
    Keys = lists:seq(1, 30),
    4650 = ec(3, Config, fun() -> mnesia:foldl(fun({_, _, N, _}, A) -> A + N end, 0, Tab) end),
    4650 = ec(3, Config, fun() -> mnesia:foldr(fun({_, _, N, _}, A) -> A + N end, 0, Tab) end),
    30 = length(ec(2, Config, fun() -> mnesia:all_keys(Tab) end)),
    10 = length(ec(2, Config, fun() -> mnesia:match_object({Tab, '_', '_', 2}) end)),
    30 = ec(2, Config, fun() -> mnesia:table_info(Tab, size) end),
    true = is_integer(ec(2, Config, fun() -> mnesia:first(Tab) end)),
    {atomic, ok} = ec(2, Config, fun() -> mnesia:clear_table(Tab) end),
    [] = converged(Config, Tab),
    ok.

collect('$end_of_table', Acc) -> Acc;
collect({Items, Cont}, Acc) -> collect(mnesia:select(Cont), Acc ++ Items).

%% The paper's Table 3 / Fig. 4-6, with a real partition: C is cut off; both sides write;
%% A deletes a key that C concurrently rewrites; after the heal everyone agrees, add wins.
%% Mnesia's table events on an EC table's copy: a subscriber on node 3 sees the writes and
%% deletes made on node 1, as they are applied there (a copy with nobody subscribed writes
%% its ETS table directly; a subscriber sends its writes through Mnesia again).
table_events(Config) ->
    Tab = create(Config, [{type, pawset}]),
    subscribed = call(3, Config, ?MODULE, subscribe_events, [Tab]),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, 1, a, 2001}) end),
    ok = ec(1, Config, fun() -> mnesia:delete({Tab, 1}) end),
    wait_until(fun() -> length(call(3, Config, ?MODULE, events, [])) =:= 2 end),
    [{write, {Tab, 1, a, 2001}, _}, {delete, {Tab, 1}, _}] = call(3, Config, ?MODULE, events, []),
    ok.

%% On a node: a process that subscribes to `Tab''s events and keeps them for events/0.
-spec subscribe_events(atom()) -> subscribed.
subscribe_events(Tab) ->
    Caller = self(),
    spawn(fun() ->
                  register(hm_test_events, self()),
                  {ok, _} = mnesia:subscribe({table, Tab, simple}),
                  Caller ! subscribed,
                  keep_events([])
          end),
    receive subscribed -> subscribed after 10000 -> not_subscribed end.

%% On a node: the events kept so far, oldest first.
-spec events() -> [term()].
events() ->
    hm_test_events ! {events, self()},
    receive {hm_test_events, Es} -> Es after 5000 -> [] end.

keep_events(Es) ->
    receive
        {mnesia_table_event, E} -> keep_events(Es ++ [E]);
        {events, From} -> From ! {hm_test_events, Es}, keep_events(Es)
    end.

partition_add_wins(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, a, x, 1}) end),
    [_] = converged(Config, Tab),
    partition([1, 2], [3], Config),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, c, x, 1}) end),
    ok = ec(1, Config, fun() -> mnesia:delete({Tab, a}) end),
    ok = ec(3, Config, fun() -> mnesia:write({Tab, b, x, 1}) end),
    ok = ec(3, Config, fun() -> mnesia:write({Tab, a, y, 2}) end),   % concurrent with the delete
    wait_until(fun() -> contents(2, Config, Tab) =:= [{Tab, c, x, 1}] end),
    [{Tab, a, y, 2}, {Tab, b, x, 1}] = contents(3, Config, Tab),
    %% heal/1 also waits until Mnesia runs as one cluster again, without a restart
    heal(Config),
    [{Tab, a, y, 2}, {Tab, b, x, 1}, {Tab, c, x, 1}] = converged(Config, Tab),
    ok.

partition_remove_wins(Config) ->
    Tab = create(Config, [{type, prwset}]),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, a, x, 1}) end),
    [_] = converged(Config, Tab),
    partition([1], [2, 3], Config),
    ok = ec(1, Config, fun() -> mnesia:delete({Tab, a}) end),
    ok = ec(2, Config, fun() -> mnesia:write({Tab, a, y, 2}) end),   % concurrent: remove wins
    ok = ec(3, Config, fun() -> mnesia:write({Tab, b, z, 3}) end),
    heal(Config),
    [{Tab, b, z, 3}] = converged(Config, Tab),
    %% a write after the heal (seeing the delete) wins as usual
    ok = ec(2, Config, fun() -> mnesia:write({Tab, a, w, 4}) end),
    [{Tab, a, w, 4}, {Tab, b, z, 3}] = converged(Config, Tab),
    ok.

%% After a cut, the copies behind by more than `catch_up_lag' operations take a member's
%% state instead of applying its operations: node 3 clears the table (prwset: remove-wins,
%% so the clear beats every write nodes 1 and 2 make meanwhile, on keys it never saw too)
%% and writes 50 keys, node 1 writes 3,000 times over 50 other keys. After the heal every
%% copy shows node 3's keys only, some copy caught up by state, and the metadata is folded.
catch_up_by_state(Config) ->
    [ok = call(I, Config, application, set_env, [hypermnesia, catch_up_lag, 20])
     || I <- [1, 2, 3]],
    try
        Tab = create(Config, [{type, prwset}]),
        ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, x, 0}) || K <- lists:seq(1, 50)], ok end),
        [_ | _] = converged(Config, Tab),
        partition([1, 2], [3], Config),
        {atomic, ok} = ec(3, Config, fun() -> mnesia:clear_table(Tab) end),
        ok = ec(3, Config, fun() -> [mnesia:write({Tab, K, z, 3}) || K <- lists:seq(100, 149)],
                                    ok end),
        ok = ec(1, Config, fun() -> [mnesia:write({Tab, K rem 50, y, K}) || K <- lists:seq(1, 3000)],
                                    ok end),
        heal(Config),
        Expected = [{Tab, K, z, 3} || K <- lists:seq(100, 149)],
        Expected = converged(Config, Tab),
        CatchUps = [maps:get(state_catch_ups, call(I, Config, hypermnesia, info, [Tab]))
                    || I <- [1, 2, 3]],
        ct:log("catch-ups by state per node: ~p", [CatchUps]),
        true = lists:sum(CatchUps) > 0,
        wait_until(fun() ->
                           lists:all(fun(I) ->
                                             #{unstable_keys := K, unstable_ops := O} =
                                                 call(I, Config, hypermnesia, info, [Tab]),
                                             {K, O} =:= {0, 0}
                                     end, [1, 2, 3])
                   end)
    after
        [call(I, Config, application, unset_env, [hypermnesia, catch_up_lag]) || I <- [1, 2, 3]]
    end.

%% A large table whose writes go to a few keys during a cut: 2,000 rows stable everywhere,
%% then node 1 writes 20 of them 3,000 times and deletes 10 others while node 3, cut off,
%% writes 10 new keys. Node 3, behind by more than its rows, takes a member's state, and the
%% member sends only the keys its operations not yet stable touched (`partial_states'): the
%% deletes of rows node 3 holds as stable among them. Every copy then shows the same.
catch_up_by_partial_state(Config) ->
    [ok = call(I, Config, application, set_env, [hypermnesia, catch_up_lag, 20])
     || I <- [1, 2, 3]],
    try
        Tab = create(Config, [{type, pawset}]),
        ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, x, 0}) || K <- lists:seq(1, 2000)],
                                    ok end),
        2000 = length(converged(Config, Tab)),
        wait_until(fun() -> lists:all(fun(I) -> unstable(I, Config, Tab) =:= {0, 0} end,
                                      [1, 2, 3]) end),
        partition([1, 2], [3], Config),
        ok = ec(1, Config, fun() -> [mnesia:write({Tab, K rem 20 + 1, y, K})
                                     || K <- lists:seq(1, 3000)],
                                    [mnesia:delete({Tab, K}) || K <- lists:seq(21, 30)],
                                    ok end),
        ok = ec(3, Config, fun() -> [mnesia:write({Tab, K, z, 3}) || K <- lists:seq(3001, 3010)],
                                    ok end),
        heal(Config),
        %% the last of node 1's writes of each of the 20 keys
        Last = maps:from_list([{K rem 20 + 1, K} || K <- lists:seq(1, 3000)]),
        Expected = lists:sort([{Tab, K, y, V} || {K, V} <- maps:to_list(Last)]
                              ++ [{Tab, K, x, 0} || K <- lists:seq(31, 2000)]
                              ++ [{Tab, K, z, 3} || K <- lists:seq(3001, 3010)]),
        Expected = converged(Config, Tab),
        Info = [call(I, Config, hypermnesia, info, [Tab]) || I <- [1, 2, 3]],
        ct:log("catch-ups by state, partial states built, per node: ~p",
               [[{maps:get(state_catch_ups, X), maps:get(partial_states, X)} || X <- Info]]),
        true = maps:get(state_catch_ups, lists:nth(3, Info)) > 0,
        true = lists:sum([maps:get(partial_states, X) || X <- Info]) > 0,
        wait_until(fun() -> lists:all(fun(I) -> unstable(I, Config, Tab) =:= {0, 0} end,
                                      [1, 2, 3]) end)
    after
        [call(I, Config, application, unset_env, [hypermnesia, catch_up_lag]) || I <- [1, 2, 3]]
    end.

unstable(I, Config, Tab) ->
    #{unstable_keys := K, unstable_ops := O} = call(I, Config, hypermnesia, info, [Tab]),
    {K, O}.

%% After quiescence no key carries metadata and no operation waits in a log (nodes 2 and 3
%% never write, yet stability progresses thanks to eager acknowledgements).
quiescent_metadata(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, K, K}) || K <- lists:seq(1, 100)], ok end),
    wait_until(fun() ->
                       lists:all(fun(I) ->
                                         #{unstable_keys := K, unstable_ops := O, size := S} =
                                             call(I, Config, hypermnesia, info, [Tab]),
                                         {K, O, S} =:= {0, 0, 100}
                                 end, [1, 2, 3])
               end),
    ok.

%% Concurrent writes of one key with different payloads: each policy picks the same on every
%% node. Once stable, no copy keeps metadata for the key: term_order and lww drop the losing
%% version, and a delete_object of the record shown removes the key everywhere; siblings
%% show both, and a delete_object removes one.
conflict_policies(Config) ->
    Base = ?config(tab, Config),
    [begin
         Tab = list_to_atom(atom_to_list(Base) ++ "_" ++ atom_to_list(P)),
         C1 = lists:keystore(tab, 1, Config, {tab, Tab}),
         Tab = create(C1, [{type, pawset}, {conflict, P}]),
         partition([1], [2, 3], C1),
         ok = ec(1, C1, fun() -> mnesia:write({Tab, k, b, 1}) end),
         ok = ec(2, C1, fun() -> mnesia:write({Tab, k, a, 2}) end),
         heal(C1),
         Result = converged(C1, Tab),
         case P of
             term_order -> [{Tab, k, b, 1}] = Result;            % greatest record
             lww -> [{Tab, k, a, 2}] = Result;                   % node 2 wrote later
             siblings -> [{Tab, k, a, 2}, {Tab, k, b, 1}] = Result
         end,
         %% stable everywhere: no metadata left (siblings: storage shows both versions)
         wait_until(fun() ->
                            lists:all(fun(I) ->
                                              #{unstable_keys := K} =
                                                  call(I, C1, hypermnesia, info, [Tab]),
                                              K =:= 0
                                      end, [1, 2, 3])
                    end),
         case P of
             siblings ->
                 ok = ec(3, C1, fun() -> mnesia:delete_object({Tab, k, b, 1}) end),
                 [{Tab, k, a, 2}] = converged(C1, Tab);
             _ ->
                 [Shown] = Result,
                 ok = ec(3, C1, fun() -> mnesia:delete_object(Shown) end),
                 [] = converged(C1, Tab)
         end,
         {atomic, ok} = call(1, C1, hypermnesia, delete_table, [Tab])
     end || P <- [term_order, lww, siblings]],
    ok.

sync_ec(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, 1, a, 1}) end]),
    %% returned once every reachable node applied it: readable everywhere at once
    [[{Tab, 1, a, 1}] = ec(I, Config, fun() -> mnesia:read(Tab, 1) end) || I <- [2, 3]],
    %% with a member unreachable, sync_ec still returns (it waits for the reachable ones)
    partition([1], [3], Config),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, 2, b, 1}) end]),
    [{Tab, 2, b, 1}] = ec(2, Config, fun() -> mnesia:read(Tab, 2) end),
    ok.

bad_input(Config) ->
    Tab = create(Config, [{type, pawset}]),
    {aborted, {bad_type, {Tab, 1}}} = catch_ec(1, Config, fun() -> mnesia:write({Tab, 1}) end),
    %% Mnesia's own error for a record of another name or size (bad_records_as_mnesia)
    {aborted, {bad_type, {other, 1, 2, 3}}} =
        catch_ec(1, Config, fun() -> mnesia:write(Tab, {other, 1, 2, 3}, write) end),
    {aborted, {no_exists, [nope, 1]}} = catch_ec(1, Config, fun() -> mnesia:read(nope, 1) end),
    {aborted, {bad_ec_option, t1, {conflict, newest}}} =
        call(1, Config, hypermnesia, create_table, [t1, [{type, pawset}, {conflict, newest}]]),
    {aborted, {bad_ec_option, t2, {disc_only_copies, _}}} =
        call(1, Config, hypermnesia, create_table,
             [t2, [{type, prwset}, {disc_only_copies, [node_n(1, Config)]}]]),
    {aborted, {already_exists, Tab}} =
        call(1, Config, hypermnesia, create_table, [Tab, [{type, pawset}]]),
    {error, {not_ec_table, nope}} = call(1, Config, hypermnesia, info, [nope]),
    %% a foreign message to the EC server is logged and dropped; the server lives on
    Pid = call(2, Config, erlang, whereis, [hm_ec_server]),
    Cookie = call(2, Config, mnesia, table_info, [Tab, cookie]),
    call(2, Config, erlang, send,
         [hm_ec_server, hm_ec_wire:envelope(Tab, 'evil@nowhere', {op, garbage}, Cookie)]),
    call(2, Config, erlang, send,
         [hm_ec_server, hm_ec_wire:envelope(Tab, node_n(1, Config), {op, garbage}, old)]),
    call(2, Config, erlang, send, [hm_ec_server, garbage]),
    Pid = call(2, Config, erlang, whereis, [hm_ec_server]),
    [] = contents(2, Config, Tab),
    ok.

%% An EC table inside mnesia:transaction: every write aborts (Mnesia sees a read_only table
%% with no node to lock) and changes nothing anywhere; reads see the local copy. Also when
%% Mnesia recomputed the table's whereabouts (as it does when replicas come and go): the
%% server reopens its copy for its own writes, and transactions stay refused.
transactions_refused(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, k, v1, 1}) end]),
    Before = converged(Config, Tab),
    [{Tab, k, v1, 1}] = Before,
    Refused = [fun() -> mnesia:write({Tab, k, tx, 1}) end,
               fun() -> mnesia:write({Tab, k2, tx, 1}) end,
               fun() -> mnesia:s_write({Tab, k, tx, 1}) end,
               fun() -> mnesia:delete({Tab, k}) end,
               fun() -> mnesia:delete_object({Tab, k, v1, 1}) end,
               fun() -> mnesia:lock({table, Tab}, write) end],
    Tx = fun(I) ->
                 [{aborted, {no_exists, Tab}} = call(I, Config, mnesia, transaction, [F])
                  || F <- Refused],
                 {aborted, {no_exists, Tab}} = call(I, Config, mnesia, clear_table, [Tab]),
                 {atomic, [{Tab, k, v1, 1}]} =
                     call(I, Config, mnesia, transaction, [fun() -> mnesia:read(Tab, k) end])
         end,
    lists:foreach(Tx, [1, 2, 3]),
    Before = converged(Config, Tab),
    read_only = call(1, Config, mnesia, table_info, [Tab, access_mode]),
    %% Mnesia recomputes where_to_commit when replicas change; here forced on node 1
    call(1, Config, mnesia_lib, set, [{Tab, where_to_commit}, []]),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, k, v2, 1}) end]),
    wait_until(fun() -> converged(Config, Tab) =:= [{Tab, k, v2, 1}] end),
    Tx2 = fun(I) -> {aborted, {no_exists, Tab}} =
                        call(I, Config, mnesia, transaction, [hd(Refused)]) end,
    lists:foreach(Tx2, [1, 2, 3]),
    [{Tab, k, v2, 1}] = converged(Config, Tab),
    %% Mnesia write-locks a table to delete it: hypermnesia's delete_table/1 still can
    {aborted, {no_exists, Tab}} = call(1, Config, mnesia, delete_table, [Tab]),
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Tab]),
    false = lists:member(Tab, call(2, Config, mnesia, system_info, [tables])),
    ok.

%% A table deleted and created again under the same name is another instance: a member's
%% message for the old one (in flight, or queued at the receiver) must not reach the new one.
%% Messages name the instance (Mnesia's cookie) and carry the wire format's version; here an
%% operation that would apply cleanly is sent to node 2 with the old cookie, then in an
%% envelope of another format version, then as it should be: only the last one applies.
other_table_instance(Config) ->
    Tab = create(Config, [{type, pawset}]),
    Old = call(2, Config, mnesia, table_info, [Tab, cookie]),
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Tab]),
    Tab = create(Config, [{type, pawset}]),
    New = call(2, Config, mnesia, table_info, [Tab, cookie]),
    true = Old =/= New,
    N1 = node_n(1, Config),
    Origin = {N1, 1},
    Op = {op, {Origin, #{Origin => 1}, {async, k9, {write, {Tab, k9, stale, 1}, {1, N1}}}}},
    Proc = hm_ec_table_server:name(Tab),
    call(2, Config, erlang, send, [Proc, hm_ec_wire:envelope(Tab, N1, Op, Old)]),
    Future = setelement(2, hm_ec_wire:envelope(Tab, N1, Op, New), hm_ec_wire:version() + 1),
    call(2, Config, erlang, send, [Proc, Future]),
    call(2, Config, erlang, send, [hm_ec_server, Future]),
    _ = call(2, Config, hypermnesia, info, [Tab]),            % handled (queued ops too)
    wait_until(fun() -> maps:get(queued_ops, call(2, Config, hypermnesia, info, [])) =:= 0 end),
    [] = call(2, Config, mnesia, dirty_read, [Tab, k9]),
    call(2, Config, erlang, send, [hm_ec_server, hm_ec_wire:envelope(Tab, N1, Op, New)]),
    wait_until(fun() -> call(2, Config, mnesia, dirty_read, [Tab, k9]) =/= [] end),
    ok.

catch_ec(I, Config, Fun) ->
    call(I, Config, erlang, apply, [fun() -> catch_exit(Fun) end, []]).

catch_exit(Fun) ->
    try hypermnesia:async_ec(Fun)
    catch exit:Reason -> Reason
    end.

non_ec_tables_untouched(Config) ->
    Tab = ?config(tab, Config),
    {atomic, ok} = call(1, Config, mnesia, create_table,
                        [Tab, [{ram_copies, nodes3(Config)}]]),
    {atomic, ok} = call(1, Config, mnesia, transaction, [fun() -> mnesia:write({Tab, 1, x}) end]),
    [{Tab, 1, x}] = call(2, Config, mnesia, dirty_read, [Tab, 1]),
    %% inside async_ec a non-EC table is plain Mnesia
    ok = ec(2, Config, fun() -> mnesia:write({Tab, 2, y}) end),
    wait_until(fun() -> call(3, Config, mnesia, dirty_read, [Tab, 2]) =:= [{Tab, 2, y}] end),
    ok.

%% A fourth node gets a copy while node 1 keeps writing: it catches up by state transfer and
%% converges. Then it restarts with an empty ram copy and catches up again.
new_copy_and_restart(Config) ->
    C = ?config(cluster, Config),
    Tab = create(Config, [{type, pawset}]),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, old, K}) || K <- lists:seq(1, 50)], ok end),
    I4 = hm_cluster:add_node(C),
    N4 = node_n(I4, Config),
    Writer = call(1, Config, erlang, spawn,
                  [fun() -> [hypermnesia:async_ec(fun() -> mnesia:write({Tab, K, new, K}) end)
                             || K <- lists:seq(51, 400)] end]),
    {atomic, ok} = call(1, Config, hypermnesia, add_table_copy, [Tab, N4, ram_copies]),
    wait_until(fun() -> not call(1, Config, erlang, is_process_alive, [Writer]) end),
    Expected = converged(Config, Tab),
    400 = length(Expected),
    wait_until(fun() -> contents(I4, Config, Tab) =:= Expected end),
    %% node 4 goes down: its ram copy comes back empty and catches up again, with what was
    %% written meanwhile
    ok = hm_cluster:kill(C, I4),
    ok = ec(2, Config, fun() -> mnesia:delete({Tab, 1}) end),
    ok = hm_cluster:restart(C, I4),
    Expected2 = converged(Config, Tab),
    399 = length(Expected2),
    wait_until(fun() -> contents(I4, Config, Tab) =:= Expected2 end),
    leave(I4, Tab, Config).

%% A node that dies for good leaves a fully replicated table while it is down: as long as
%% it is a member, what the others write stays unstable (it may come back and need it); it
%% cannot be removed table by table while down (Mnesia changes the copies of a table only
%% while its disc nodes run); forget_node/1 removes it from the cluster, so the others stop
%% waiting for it, their logs and metadata empty, and they converge.
dead_node_leaves_a_table(Config) ->
    C = ?config(cluster, Config),
    Tab = create(Config, [{type, pawset}]),
    I4 = hm_cluster:add_node(C),
    N4 = node_n(I4, Config),
    {atomic, ok} = call(1, Config, hypermnesia, add_table_copy, [Tab, N4, ram_copies]),
    Expected = written_while_it_dies(C, I4, N4, Tab, Config),
    {aborted, {not_active, _, _, [N4]}} = call(1, Config, hypermnesia, del_table_copy, [Tab, N4]),
    {atomic, ok} = call(1, Config, hypermnesia, forget_node, [N4]),
    wait_until(fun() -> lists:all(fun(I) -> quiet_without(I, N4, Tab, Config) end,
                                  [1, 2, 3]) end),
    Expected = converged(Config, Tab),
    false = lists:member(N4, call(1, Config, mnesia, system_info, [db_nodes])),
    ok.

%% A node whose schema is in RAM dies: its copy is removed table by table while it is down
%% (hypermnesia:del_table_copy/2, as Mnesia allows for such a node), and the others stop
%% waiting for it and converge.
dead_node_with_its_schema_in_ram_leaves_a_table(Config) ->
    C = ?config(cluster, Config),
    Tab = create(Config, [{type, pawset}]),
    I4 = hm_cluster:add_node(C, #{schema => ram_copies}),
    N4 = node_n(I4, Config),
    {atomic, ok} = call(1, Config, hypermnesia, add_table_copy, [Tab, N4, ram_copies]),
    Expected = written_while_it_dies(C, I4, N4, Tab, Config),
    {atomic, ok} = call(1, Config, hypermnesia, del_table_copy, [Tab, N4]),
    wait_until(fun() -> lists:all(fun(I) -> quiet_without(I, N4, Tab, Config) end,
                                  [1, 2, 3]) end),
    Expected = converged(Config, Tab),
    {atomic, ok} = call(1, Config, mnesia, del_table_copy, [schema, N4]),
    ok.

%% The copy on node I4 (N4) holds 50 rows written on node 1; I4 is killed and node 2
%% writes them again: the rows every copy must end with. The others keep operations for
%% the dead copy meanwhile (stability waits for it).
written_while_it_dies(C, I4, N4, Tab, Config) ->
    Keys = lists:seq(1, 50),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, a, K}) || K <- Keys], ok end),
    wait_until(fun() -> length(contents(I4, Config, Tab)) =:= 50 end),
    ok = hm_cluster:kill(C, I4),
    ok = ec(2, Config, fun() -> [mnesia:write({Tab, K, b, K}) || K <- Keys], ok end),
    Expected = [{Tab, K, b, K} || K <- Keys],
    wait_until(fun() -> contents(3, Config, Tab) =:= Expected end),
    #{unstable_ops := Held, members := Members} = call(1, Config, hypermnesia, info, [Tab]),
    true = Held > 0 andalso lists:member(N4, Members),
    Expected.

%% Node I's copy of Tab is stable and no longer counts node N4 as a member.
quiet_without(I, N4, Tab, Config) ->
    case call(I, Config, hypermnesia, info, [Tab]) of
        #{unstable_ops := 0, unstable_keys := 0, members := Ms} -> not lists:member(N4, Ms);
        _ -> false
    end.

%% Node I leaves the cluster for good: its copy of Tab, then the node and its schema copy.
leave(I, Tab, Config) ->
    N = node_n(I, Config),
    {atomic, ok} = call(1, Config, hypermnesia, del_table_copy, [Tab, N]),
    stopped = call(I, Config, mnesia, stop, []),
    ok = hm_cluster:kill(?config(cluster, Config), I),
    {atomic, ok} = call(1, Config, mnesia, del_table_copy, [schema, N]),
    ok.

%% A disc_copies node cut off from the others acknowledges writes (sync_ec: on
%% its disc), is killed with kill -9, comes back: every acknowledged write, including those it
%% could not send before dying, reaches every node.
disc_kill_restart(Config) ->
    C = ?config(cluster, Config),
    Tab = ?config(tab, Config),
    I4 = hm_cluster:add_node(C),
    N4 = node_n(I4, Config),
    [N1, N2, N3] = nodes3(Config),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [id, v]},
                               {disc_copies, [N1, N4]}, {ram_copies, [N2, N3]}]]),
    Sync = fun(I, K) -> ok = call(I, Config, hypermnesia, sync_ec,
                                   [fun() -> mnesia:write({Tab, K, node()}) end]) end,
    [Sync(I4, K) || K <- lists:seq(1, 20)],
    partition([I4], [1, 2, 3], Config),
    [Sync(I4, K) || K <- lists:seq(21, 30)],           % acknowledged, not sent
    ok = call(1, Config, hypermnesia, async_ec, [fun() -> mnesia:write({Tab, 31, node()}) end]),
    ok = hm_cluster:kill(C, I4),
    %% the network heals while node 4 is down; then it restarts from its disc
    heal(Config),
    ok = hm_cluster:restart(C, I4),
    Keys = lists:seq(1, 31),
    wait_until(fun() ->
                       lists:all(fun(I) -> [K || {_, K, _} <- contents(I, Config, Tab)] =:= Keys end,
                                 [1, 2, 3, I4])
               end),
    %% leave the cluster as it was
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Tab]),
    stopped = call(I4, Config, mnesia, stop, []),
    ok = hm_cluster:kill(C, I4),
    {atomic, ok} = call(1, Config, mnesia, del_table_copy, [schema, N4]),
    ok.

%% prwset: a clear_table beats writes concurrent with it, also on keys the clearing node did
%% not have yet (add-wins would keep them).
clear_remove_wins(Config) ->
    Tab = create(Config, [{type, prwset}]),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, old, x, 1}) end),
    [_] = converged(Config, Tab),
    partition([1], [2, 3], Config),
    {atomic, ok} = ec(1, Config, fun() -> mnesia:clear_table(Tab) end),
    ok = ec(2, Config, fun() -> mnesia:write({Tab, new, y, 2}) end),   % concurrent with clear
    heal(Config),
    [] = converged(Config, Tab),
    ok = ec(3, Config, fun() -> mnesia:write({Tab, later, z, 3}) end), % after: survives
    [{Tab, later, z, 3}] = converged(Config, Tab),
    ok.

%% Transient failure, delivery out of order: only the link 1-2 is cut (nodes 1 and 3, and 3
%% and 2, still talk). Node 1 writes k; node 3 receives it and deletes k, writes j. Node 2 gets
%% node 3's operations first: the delete of k must wait for the write it causally follows
%% (it is buffered), and k must never show on node 2. After the link heals, all agree.
transient_reorder(Config) ->
    Tab = create(Config, [{type, prwset}]),
    partition([1], [2], Config),
    ok = ec(1, Config, fun() -> mnesia:write({Tab, k, x, 1}) end),
    wait_until(fun() -> contents(3, Config, Tab) =:= [{Tab, k, x, 1}] end),
    ok = ec(3, Config, fun() -> mnesia:delete({Tab, k}), mnesia:write({Tab, j, y, 2}) end),
    wait_until(fun() -> maps:get(buffered_ops, call(2, Config, hypermnesia, info, [Tab])) =:= 2
               end),
    [] = contents(2, Config, Tab),               % nothing shown out of causal order
    heal(Config),
    [{Tab, j, y, 2}] = converged(Config, Tab),
    0 = maps:get(buffered_ops, call(2, Config, hypermnesia, info, [Tab])),
    ok.

%% A partition under full load, then the wait for every copy. One pawset ram table of 10,000
%% keys on the three nodes, two unthrottled writers per node (random keys, async_ec); node 3
%% is cut off from the others while they write, healed, and the writers stop later. Every
%% copy must converge (same contents, same delivered vector, nothing buffered) within 60 s
%% of the writers stopping. Short timings in `make test'; `HM_LOAD=full' (make faults) runs
%% the cut from second 4 to 8 and stops the writers at second 14. Before retransmission
%% started from what each member reports it has delivered, the copies stayed apart for good:
%% every acknowledgement waited for operations the other side would only resend from the
%% start of its log, capped.
partition_under_full_load(Config) ->
    Tab = create(Config, [{type, pawset}]),
    {Cut, Heal, Stop} = case os:getenv("HM_LOAD") of
                            "full" -> {4000, 8000, 14000};
                            _ -> {1500, 3500, 6000}
                        end,
    Parent = self(),
    T0 = erlang:monotonic_time(millisecond),
    Writers = [spawn_link(fun() ->
                                  Parent ! {written, I, call_long(I, Config, ?MODULE, load_writers,
                                                                  [Tab, 2, 10000, Stop])}
                          end) || I <- [1, 2, 3]],
    sleep_until(T0 + Cut),
    partition([3], [1, 2], Config),
    sleep_until(T0 + Heal),
    heal(Config),
    Written = [receive {written, I, N} -> N end || I <- [1, 2, 3]],
    Stopped = erlang:monotonic_time(millisecond),
    ct:pal("~p writers done ~p ms after the start (cut ~p-~p ms): ~p writes per node",
           [length(Writers), Stopped - T0, Cut, Heal, Written]),
    wait_until(fun() -> length(lists:usort([digest_of(I, Config, Tab) || I <- [1, 2, 3]])) =:= 1
               end, 600),
    Took = erlang:monotonic_time(millisecond) - Stopped,
    true = Took =< 60000,
    [#{buffered_ops := 0, status := ready} = call(I, Config, hypermnesia, info, [Tab])
     || I <- [1, 2, 3]],
    ct:pal("converged ~p ms after the writers stopped", [Took]),
    {comment, io_lib:format("~p writes, converged ~p ms after the writers stopped",
                            [lists:sum(Written), Took])}.

call_long(I, Config, M, F, A) -> hm_cluster:call(?config(cluster, Config), I, M, F, A, 120000).

sleep_until(T) -> timer:sleep(max(0, T - erlang:monotonic_time(millisecond))).

digest_of(I, Config, Tab) -> call(I, Config, ?MODULE, digest, [Tab]).

%% Runs on a node: a hash of the table's contents, the delivered vector, what is buffered.
digest(Tab) ->
    #{delivered := D, buffered_ops := B} = hypermnesia:info(Tab),
    {erlang:phash2(lists:sort(ets:tab2list(Tab))), D, B}.

%% Runs on a node: `N' writers of random keys among `Keys' until `StopMs' after the call
%% (this node's clock); returns how many writes returned ok.
load_writers(Tab, N, Keys, StopMs) ->
    Deadline = erlang:monotonic_time(millisecond) + StopMs,
    Self = self(),
    Pids = [spawn_link(fun() -> Self ! {self(), write_loop(Tab, Keys, Deadline, 0)} end)
            || _ <- lists:seq(1, N)],
    lists:sum([receive {P, C} -> C end || P <- Pids]).

write_loop(Tab, Keys, Deadline, C) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> C;
        false ->
            K = rand:uniform(Keys),
            Ok = try hypermnesia:async_ec(fun() -> mnesia:write({Tab, K, node(), C}) end) of
                     ok -> 1;
                     _ -> 0
                 catch _:_ -> 0
                 end,
            write_loop(Tab, Keys, Deadline, C + Ok)
    end.

%% Mnesia alone restarts on a node (the hypermnesia application keeps running), as Mnesia's
%% own tests do: the node's ram copy comes back empty, and must be taken up again as a new
%% copy that catches up by state transfer, then take writes that reach everyone. (Before,
%% the server kept the table's old state: the copy reported `ready' with size 0 for good,
%% and a later write there left the copies different for good.)
mnesia_restart_ram_copy(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, a, 1}) || K <- lists:seq(1, 20)], ok end),
    20 = length(converged(Config, Tab)),
    stopped = call(3, Config, mnesia, stop, []),
    ok = call(3, Config, mnesia, start, []),
    ok = call(3, Config, mnesia, wait_for_tables, [[Tab], 20000]),
    wait_until(fun() -> ready(3, Config, Tab) andalso
                            length(contents(3, Config, Tab)) =:= 20 end),
    ok = ec(3, Config, fun() -> mnesia:write({Tab, 21, c, 3}) end),
    ok = ec(1, Config, fun() -> mnesia:delete({Tab, 1}) end),
    Final = converged(Config, Tab),
    20 = length(Final),
    false = lists:keymember(1, 2, Final),
    true = lists:keymember(21, 2, Final),
    ok.

%%% ------------------------------------------------------------- Mnesia's conventions

%% Inside async_ec an EC table answers bad records exactly as a plain Mnesia table answers them
%% inside async_dirty (mnesia.erl's own checks, with its error terms), and a refused call
%% issues no operation. In particular a delete_object of a record holding match variables
%% ('_', '$1') aborts with {bad_type, Tab, Record}; it used to be accepted and broadcast.
bad_records_as_mnesia(Config) ->
    Tab = create(Config, [{type, pawset}]),
    Plain = list_to_atom(atom_to_list(Tab) ++ "_plain"),
    {atomic, ok} = call(1, Config, mnesia, create_table,
                        [Plain, [{attributes, [id, name, year]},
                                 {ram_copies, [node_n(1, Config)]}]]),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, k, x, 1}) end]),
    #{delivered := Delivered} = call(1, Config, hypermnesia, info, [Tab]),
    Bad = [fun(T) -> mnesia:delete_object(T, {T, {['_']}, 21}, write) end,
           fun(T) -> mnesia:delete_object({T, k, '_', 1}) end,
           fun(T) -> mnesia:s_delete_object({T, '$1', x, 1}) end,
           fun(T) -> mnesia:delete_object(T, {T, k, x, ['$2']}, write) end,
           fun(T) -> mnesia:delete_object({T, '_', '_', '_'}) end,
           fun(T) -> mnesia:delete_object(T, {T, k}, write) end,
           fun(T) -> mnesia:delete_object(T, nope, write) end,
           fun(T) -> mnesia:delete_object(T, {other, k, x, 1}, write) end,   % matches nothing
           fun(T) -> mnesia:delete_object(T, {T, k, x}, write) end,          % matches nothing
           fun(T) -> mnesia:write(T, {other, 1, 2, 3}, write) end,
           fun(T) -> mnesia:write(T, {T, 1, 2}, write) end,
           fun(T) -> mnesia:write(T, {T, 1}, write) end,
           fun(T) -> mnesia:write(T, nope, write) end,
           fun(T) -> mnesia:write({T, 1}) end],
    Outcome = fun(T, F) -> catch_ec(1, Config, fun() -> F(T) end) end,
    [{F, Expected} = {F, Outcome(Tab, F)}
     || F <- Bad, Expected <- [rename(Outcome(Plain, F), Plain, Tab)]],
    %% the issue's case, and the shapes the guide lists
    {aborted, {bad_type, Tab, {Tab, {['_']}, 21}}} = Outcome(Tab, hd(Bad)),
    {aborted, {bad_type, {other, 1, 2, 3}}} = Outcome(Tab, lists:nth(10, Bad)),
    {aborted, {bad_type, Tab, {Tab, 1}, write}} = Outcome(Tab, lists:nth(12, Bad)),
    {aborted, {bad_type, Tab}} = Outcome(Tab, lists:nth(6, Bad)),
    %% nothing was issued, nothing changed anywhere
    #{delivered := Delivered} = call(1, Config, hypermnesia, info, [Tab]),
    [{Tab, k, x, 1}] = converged(Config, Tab),
    {atomic, ok} = call(1, Config, mnesia, delete_table, [Plain]),
    ok.

rename(Plain, Plain, Tab) -> Tab;
rename(T, Plain, Tab) when is_tuple(T) ->
    list_to_tuple(rename(tuple_to_list(T), Plain, Tab));
rename([H | T], Plain, Tab) -> [rename(H, Plain, Tab) | rename(T, Plain, Tab)];
rename(X, _, _) -> X.

%% With the hypermnesia application stopped on a node (Mnesia still running there), EC writes
%% abort as Mnesia's own activities do on a node where Mnesia does not run: {aborted,
%% {node_not_running, Node}}, at once, writing nothing. Reads are Mnesia's and still work;
%% info says node_not_running too. Started again, the copy catches up and takes writes.
without_application(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({Tab, k, x, 1}) end]),
    N3 = node_n(3, Config),
    ok = call(3, Config, application, stop, [hypermnesia]),
    Down = {aborted, {node_not_running, N3}},
    Down = catch_ec(3, Config, fun() -> mnesia:write({Tab, k2, y, 2}) end),
    Down = catch_ec(3, Config, fun() -> mnesia:delete({Tab, k}) end),
    Down = catch_ec(3, Config, fun() -> mnesia:delete_object({Tab, k, x, 1}) end),
    Down = catch_ec(3, Config, fun() -> mnesia:clear_table(Tab) end),
    Down = call(3, Config, erlang, apply,
                [fun() ->
                         try hypermnesia:sync_ec(fun() -> mnesia:write({Tab, k3, z, 3}) end)
                         catch exit:R -> R
                         end
                 end, []]),
    [{Tab, k, x, 1}] = catch_ec(3, Config, fun() -> mnesia:read(Tab, k) end),
    {error, {node_not_running, N3}} = call(3, Config, hypermnesia, info, [Tab]),
    {error, {node_not_running, N3}} = call(3, Config, hypermnesia, info, []),
    [{Tab, k, x, 1}] = call(3, Config, mnesia, dirty_select, [Tab, [{'_', [], ['$_']}]]),
    ok = call(3, Config, hypermnesia, start, []),
    wait_until(fun() -> ready(3, Config, Tab) end),
    ok = ec(3, Config, fun() -> mnesia:write({Tab, k4, w, 4}) end),
    [{Tab, k, x, 1}, {Tab, k4, w, 4}] = converged(Config, Tab),
    ok.

%% A table's copy process stopped while writes wait for it (a partitioned table's fragment
%% moving away, the application stopping): a write that waited is either applied by the
%% copy before it stops, or passed on to another holder; it never fails. Before, a write that
%% waited when the copy was stopped aborted with node_not_running, and one that the copy had
%% begun could be cut off half done.
copy_stopped_under_write(Config) ->
    Tab = create(Config, [{type, pawset}]),
    ok = call(1, Config, ?MODULE, stop_copy_under_write, [Tab, write_first]),
    wait_until(fun() -> ready(1, Config, Tab) end),
    ok = call(1, Config, ?MODULE, stop_copy_under_write, [Tab, stop_first]),
    wait_until(fun() -> ready(1, Config, Tab) end),
    [{Tab, stop_first, x, 1}, {Tab, write_first, x, 1}] = converged(Config, Tab),
    ok.

%% Runs on a copy holder: with the copy's process held (sys:suspend/1), a write and the
%% supervisor's stop reach it in the order `Order' says; then it runs again. The write's
%% result.
stop_copy_under_write(Tab, Order) ->
    Pid = whereis(hm_ec_table_server:name(Tab)),
    ok = sys:suspend(Pid),
    Self = self(),
    Write = fun() ->
                    spawn(fun() ->
                                  R = try hypermnesia:async_ec(
                                            fun() -> mnesia:write({Tab, Order, x, 1}) end)
                                      catch C:E -> {C, E}
                                      end,
                                  Self ! {written, R}
                          end)
            end,
    Stop = fun() -> spawn(fun() -> supervisor:terminate_child(hm_ec_table_sup, Pid) end) end,
    case Order of
        write_first -> Write(), queued(Pid, [call]), Stop(), queued(Pid, [call, stop]);
        stop_first -> Stop(), queued(Pid, [stop]), Write(), queued(Pid, [stop, call])
    end,
    try sys:resume(Pid) catch exit:_ -> ok end,             % stopped meanwhile
    receive {written, R} -> R after 30000 -> error(write_stuck) end.

%% Until the write's call and the supervisor's stop wait in `Pid''s mailbox in the order
%% `Kinds' (other messages in between), or `Pid' is gone (at most 10 s).
queued(Pid, Kinds) -> queued(Pid, Kinds, 1000).

queued(Pid, Kinds, 0) -> error({not_queued, Pid, Kinds});
queued(Pid, Kinds, Tries) ->
    case erlang:process_info(Pid, messages) of
        undefined -> ok;
        {messages, Ms} ->
            case [K || M <- Ms, K <- [kind(M)], K =/= other] of
                Kinds -> ok;
                _ -> timer:sleep(10), queued(Pid, Kinds, Tries - 1)
            end
    end.

kind({'$gen_call', _, {submit, _, _}}) -> call;
kind({'$gen_call', _, {submit_after, _, _, _}}) -> call;
kind({'EXIT', _, shutdown}) -> stop;
kind(_) -> other.

%% Mnesia deleting a table deletes its storage (an ETS table) before its schema says the
%% table is gone: the table's process, applying an operation in between, is told `badarg'
%% by Mnesia's reads. It ends quietly, as for a table gone (a notice), with no error report:
%% deleting a table under load used to log one. Made on a node of its own, since the case
%% deletes the storage itself and leaves that node's Mnesia inconsistent.
storage_gone_under_the_process(Config) ->
    C = hm_cluster:start(#{nodes => 1, prefix => "hmgone", modules => [?MODULE],
                           dir => filename:join(?config(priv_dir, Config), "gone")}),
    try
        Tab = ?config(tab, Config),
        [N] = hm_cluster:nodes(C),
        Call = fun(M, F, A) -> hm_cluster:call(C, 1, M, F, A) end,
        {atomic, ok} = Call(hypermnesia, create_table,
                            [Tab, [{type, pawset}, {attributes, [k, v]}, {ram_copies, [N]}]]),
        ok = Call(hypermnesia, activity, [async_ec, fun() -> mnesia:write({Tab, 1, a}) end]),
        %% the key's metadata folded: deleting it reads storage
        ok = hm_cluster:wait_until(
               fun() -> maps:get(unstable_keys, Call(hypermnesia, info, [Tab])) =:= 0 end,
               10000),
        {Ended, Logs} = Call(?MODULE, delete_under_the_process, [Tab]),
        ?assertEqual(ended, Ended),
        ?assertEqual([], [M || {error, M} <- Logs]),
        ?assertMatch([_ | _], [M || {notice, M} <- Logs, string:find(M, "is gone") =/= nomatch])
    after
        hm_cluster:stop(C)
    end.

%% On the case's node: delete `Tab''s storage as Mnesia's delete does first, make the
%% table's process read it (a delete_object of key 1), and wait (10 s at most) for the
%% process to end: `ended' or `running', and what it logged meanwhile, as `{Level, Text}'.
delete_under_the_process(Tab) ->
    Pid = whereis(hm_ec_table_server:name(Tab)),
    Ref = monitor(process, Pid),
    ok = logger:add_handler(hm_ec_suite_capture, ?MODULE,
                            #{level => notice, config => #{to => self()}}),
    true = ets:delete(Tab),
    _ = try hypermnesia:activity(async_ec, fun() -> mnesia:delete_object({Tab, 1, a}) end)
        catch exit:_ -> aborted
        end,
    Ended = receive {'DOWN', Ref, process, Pid, _} -> ended
            after 10000 -> running
            end,
    ok = logger:remove_handler(hm_ec_suite_capture),
    {Ended, logs([])}.

logs(Acc) ->
    receive {hm_ec_suite_log, L, Text} -> logs([{L, Text} | Acc])
    after 0 -> lists:reverse(Acc)
    end.

%% @doc A logger handler (added by delete_under_the_process/1): every event to the process
%% `to' of its config.
-spec log(logger:log_event(), logger:handler_config()) -> term().
log(#{level := L, msg := Msg}, #{config := #{to := To}}) ->
    Text = case Msg of
               {string, S} -> unicode:characters_to_list(S);
               {report, R} -> lists:flatten(io_lib:format("~0p", [R]));
               {Format, Args} -> lists:flatten(io_lib:format(Format, Args))
           end,
    To ! {hm_ec_suite_log, L, Text}.

%% A copy on a node that is not a Mnesia db node is refused at once with Mnesia's own error
%% for a copy on a node it does not run on ({not_active, Tab, Node}, what mnesia:create_table/2
%% answers for disc_copies there), and nothing is created. Such a copy could never catch up
%% (and, before, create_table waited 5 s and returned {atomic, ok}). A db node that is only
%% down is accepted, as Mnesia does: its copy catches up when it comes back.
create_table_not_db_node(Config) ->
    Tab = ?config(tab, Config),
    [N1, N2, N3] = nodes3(Config),
    Ghost = 'ghost@nowhere',
    {aborted, {not_active, Tab, Ghost}} =
        call(1, Config, mnesia, create_table, [Tab, [{disc_copies, [Ghost]}]]),
    [{Opts, {aborted, {not_active, Tab, Ghost}}} =
         {Opts, call(1, Config, hypermnesia, create_table, [Tab, [{type, pawset} | Opts]])}
     || Opts <- [[{ram_copies, [N1, Ghost]}],
                 [{disc_copies, [N1, Ghost]}],
                 [{ram_copies, [N1]}, {disc_copies, [Ghost]}],
                 [{ram_copies, [Ghost]}]]],
    Tables = call(1, Config, mnesia, system_info, [tables]),
    [false = lists:member(T, Tables)
     || T <- [Tab | [list_to_atom(P ++ atom_to_list(Tab)) || P <- ["hm_meta_", "hm_log_"]]]],
    %% node 3 is a db node whose Mnesia is stopped: accepted
    stopped = call(3, Config, mnesia, stop, []),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [id, name, year]},
                               {ram_copies, [N1, N2, N3]}]]),
    %% (the new copies wait for node 3's before taking writes: see create/2 in the guide)
    ok = call(3, Config, mnesia, start, []),
    ok = call(3, Config, mnesia, wait_for_tables, [[Tab], 30000]),
    wait_until(fun() -> lists:all(fun(I) -> ready(I, Config, Tab) end, [1, 2, 3]) end),
    ok = call(3, Config, hypermnesia, async_ec, [fun() -> mnesia:write({Tab, k, x, 1}) end]),
    [{Tab, k, x, 1}] = converged(Config, Tab),
    ok.

%% mnesia:restore/2 cannot restore an EC table (Mnesia write-locks what it restores, and an EC
%% table is read_only for Mnesia): it aborts with {no_exists, Tab} and changes nothing.
%% hypermnesia:restore/2 restores it as EC operations, on every copy: clear_tables (the
%% default) clears it and writes the backup's records, keep_tables writes them over what is
%% there; recreate_tables is refused for an EC table. Plain tables in the same backup are
%% restored by Mnesia; the per-copy helper tables never are.
restore_backup(Config) ->
    Tab = create(Config, [{type, pawset}]),
    Plain = list_to_atom(atom_to_list(Tab) ++ "_plain"),
    Helpers = [list_to_atom(P ++ atom_to_list(Tab)) || P <- ["hm_meta_", "hm_log_"]],
    {atomic, ok} = call(1, Config, mnesia, create_table,
                        [Plain, [{ram_copies, nodes3(Config)}]]),
    ok = call(1, Config, hypermnesia, sync_ec,
              [fun() -> [mnesia:write({Tab, K, v, K}) || K <- [1, 2, 3]], ok end]),
    {atomic, ok} = call(1, Config, mnesia, transaction,
                        [fun() -> mnesia:write({Plain, p, before}) end]),
    File = filename:join(?config(priv_dir, Config), "restore_backup.bup"),
    %% ram_copies: the backup of what is in RAM (mnesia:backup/1 takes what was dumped to disc)
    {ok, Cp, _} = call(1, Config, mnesia, activate_checkpoint,
                       [[{max, [Tab, Plain | Helpers]}, {ram_overrides_dump, true}]]),
    ok = call(1, Config, mnesia, backup_checkpoint, [Cp, File]),
    ok = call(1, Config, mnesia, deactivate_checkpoint, [Cp]),
    Backup = [{Tab, K, v, K} || K <- [1, 2, 3]],
    %% changes after the backup
    ok = ec(2, Config, fun() -> mnesia:delete({Tab, 1}), mnesia:write({Tab, 4, new, 4}) end),
    {atomic, ok} = call(1, Config, mnesia, transaction,
                        [fun() -> mnesia:write({Plain, p, later}) end]),
    Later = [{Tab, 2, v, 2}, {Tab, 3, v, 3}, {Tab, 4, new, 4}],
    Later = converged(Config, Tab),
    %% Mnesia's own restore: refused, nothing changed (documented)
    {aborted, {no_exists, Tab}} = call(1, Config, mnesia, restore, [File, []]),
    {aborted, {recreate_ec_table, Tab}} =
        call(1, Config, hypermnesia, restore, [File, [{recreate_tables, [Tab]}]]),
    {aborted, {badarg, nope}} = call(1, Config, hypermnesia, restore, [File, [nope]]),
    Later = converged(Config, Tab),
    [{Plain, p, later}] = call(3, Config, mnesia, dirty_read, [Plain, p]),
    %% the default, clear_tables: exactly the backup, everywhere
    {atomic, Restored} = call(2, Config, hypermnesia, restore, [File, []]),
    true = lists:sort([Tab, Plain]) =:= lists:sort([T || T <- Restored, T =:= Tab orelse T =:= Plain]),
    [] = [H || H <- Helpers, lists:member(H, Restored)],
    Backup = converged(Config, Tab),
    [{Plain, p, before}] = call(3, Config, mnesia, dirty_read, [Plain, p]),
    %% keep_tables: the backup's records over what is there
    ok = ec(3, Config, fun() -> mnesia:write({Tab, 1, changed, 1}), mnesia:write({Tab, 5, x, 5}) end),
    {atomic, [Tab]} = call(1, Config, hypermnesia, restore,
                           [File, [{keep_tables, [Tab]}, {default_op, skip_tables}]]),
    true = Backup ++ [{Tab, 5, x, 5}] =:= converged(Config, Tab),
    {atomic, ok} = call(1, Config, mnesia, delete_table, [Plain]),
    ok.

%%% ------------------------------------------------------------- transactions stay refused

%% Transactions stay refused on every node, whatever happens to the cluster: a copy holder's
%% Mnesia stopping and starting again, a Mnesia crash, a partition and its heal, a copy removed
%% and added. Mnesia recomputes the table's write-lock targets on each of these events; before,
%% the first node down made mnesia:transaction/1 write the surviving copies locally
%% ({atomic, ok}) and mnesia:delete_table/1 delete the table, leaving its helper tables behind.
%% Through it all the EC server's own writes keep reaching every copy.
transactions_refused_across_events(Config) ->
    Tab = create(Config, [{type, pawset}]),
    [N1, N2, N3] = All = nodes3(Config),
    %% the same with disc_copies
    Disc = list_to_atom(atom_to_list(Tab) ++ "_disc"),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Disc, [{type, pawset}, {attributes, [id, name, year]},
                                {disc_copies, All}]]),
    Tabs = [Tab, Disc],
    wait_until(fun() -> lists:all(fun(I) -> ready(I, Config, Disc) end, [1, 2, 3]) end),
    [ok = call(1, Config, hypermnesia, sync_ec, [fun() -> mnesia:write({T, k, x, 1}) end])
     || T <- Tabs],
    [[{T, k, x, 1}] = converged(Config, T) || T <- Tabs],
    Refused = fun(Stage, Is) -> [tx_refused(Stage, Config, T, Is) || T <- Tabs] end,
    Refused(created, [1, 2, 3]),
    %% Mnesia stops on node 3, then starts again (the application keeps running)
    stopped = call(3, Config, mnesia, stop, []),
    wait_running(Config, [1, 2], [N1, N2]),
    Refused(mnesia_stopped, [1, 2]),
    ok = call(3, Config, mnesia, start, []),
    ok = call(3, Config, mnesia, wait_for_tables, [Tabs, 30000]),
    wait_running(Config, [1, 2, 3], All),
    settled(Config, Tabs),
    Refused(mnesia_restarted, [1, 2, 3]),
    %% Mnesia crashes on node 2, then starts again
    _ = call(2, Config, mnesia, lkill, []),
    wait_running(Config, [1, 3], [N1, N3]),
    Refused(mnesia_killed, [1, 3]),
    ok = call(2, Config, mnesia, start, []),
    ok = call(2, Config, mnesia, wait_for_tables, [Tabs, 30000]),
    wait_running(Config, [1, 2, 3], All),
    settled(Config, Tabs),
    Refused(mnesia_started_after_kill, [1, 2, 3]),
    %% a partition, on both sides, and its heal
    partition([1], [2, 3], Config),
    wait_running(Config, [1], [N1]),
    wait_running(Config, [2, 3], [N2, N3]),
    Refused(partitioned, [1, 2, 3]),
    heal(Config),
    Refused(healed, [1, 2, 3]),
    %% copy changes
    [{atomic, ok} = call(1, Config, hypermnesia, del_table_copy, [T, N3]) || T <- Tabs],
    Refused(copy_removed, [1, 2]),
    {atomic, ok} = call(1, Config, hypermnesia, add_table_copy, [Tab, N3, ram_copies]),
    {atomic, ok} = call(1, Config, hypermnesia, add_table_copy, [Disc, N3, disc_copies]),
    wait_until(fun() -> ready(3, Config, Tab) andalso ready(3, Config, Disc) end),
    Refused(copy_added, [1, 2, 3]),
    %% the servers' own writes still reach every copy, from every node
    [begin
         Rec = {T, {last, I}, x, I},
         ok = ec(I, Config, fun() -> mnesia:write(Rec) end),
         wait_until(fun() ->
                            lists:all(fun(J) -> call(J, Config, mnesia, dirty_read,
                                                     [T, {last, I}]) =:= [Rec] end,
                                      [1, 2, 3])
                    end)
     end || T <- Tabs, I <- [1, 2, 3]],
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Disc]),
    ok.

%% A restarted copy has caught up (a ram copy comes back empty and takes a state transfer):
%% every copy ready and the same, so what the next checks read does not change under them.
settled(Config, Tabs) ->
    [begin
         wait_until(fun() -> lists:all(fun(I) -> ready(I, Config, T) end, [1, 2, 3]) end),
         converged(Config, T)
     end || T <- Tabs],
    ok.

%% On each node of `Is': every way a transaction writes `Tab' aborts with {no_exists, Tab} and
%% leaves the local copy as it was; and Mnesia's delete_table/1 is refused.
tx_refused(Stage, Config, Tab, Is) ->
    No = {aborted, {no_exists, Tab}},
    Writes = [fun() -> mnesia:write({Tab, tx, x, 1}) end,
              fun() -> mnesia:s_write({Tab, tx, x, 1}) end,
              fun() -> mnesia:delete({Tab, k}) end,
              fun() -> mnesia:delete_object({Tab, k, x, 1}) end,
              fun() -> mnesia:write_lock_table(Tab) end],
    [begin
         Before = call(I, Config, mnesia, dirty_select, [Tab, [{'_', [], ['$_']}]]),
         [{Stage, I, W, No} = {Stage, I, W, call(I, Config, mnesia, transaction, [W])}
          || W <- Writes],
         {Stage, I, No} = {Stage, I, call(I, Config, mnesia, clear_table, [Tab])},
         {Stage, I, Before} = {Stage, I, call(I, Config, mnesia, dirty_select,
                                              [Tab, [{'_', [], ['$_']}]])}
     end || I <- Is],
    {Stage, No} = {Stage, call(hd(Is), Config, mnesia, delete_table, [Tab])},
    ok.

wait_running(Config, Is, Nodes) ->
    Expected = lists:sort(Nodes),
    wait_until(fun() ->
                       lists:all(fun(I) ->
                                         lists:sort(call(I, Config, mnesia, system_info,
                                                         [running_db_nodes])) =:= Expected
                                 end, Is)
               end).
