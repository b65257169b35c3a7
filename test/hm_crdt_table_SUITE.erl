%% @doc CRDT tables on three real nodes (OTP `peer', the shared harness {@link hm_cluster}):
%% every type and flavor from the public API, fully replicated and partitioned, updated from
%% every node, through a real partition with updates on both sides, and a node killed (every
%% type and flavor: killed during a partition, restarted, all copies compared), and reads
%% that show every update a copy applied before its row is written (write-behind).
-module(hm_crdt_table_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, end_per_testcase/2]).
-export([api_and_errors/1, conveniences/1, partition_every_type/1, node_killed/1,
         partition_and_kill_every_type/1, config_file/1, read_your_writes/1]).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [api_and_errors, conveniences, partition_every_type, node_killed,
          partition_and_kill_every_type, config_file, read_your_writes].

init_per_suite(Config) ->
    C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config),
                           prefix => os:getenv("HM_PEER_PREFIX", "crdtk"), modules => [?MODULE]}),
    [{cluster, C} | Config].

end_per_suite(Config) -> hm_cluster:stop(?config(cluster, Config)).

end_per_testcase(_Case, Config) ->
    C = ?config(cluster, Config),
    hm_cluster:heal(C),
    [_ = call(1, Config, hypermnesia, delete_table, [T])
     || T <- call(1, Config, mnesia, system_info, [tables]), is_crdt_tab(T)],
    ok.

is_crdt_tab(T) -> lists:prefix("c_", atom_to_list(T)) andalso
                      string:find(atom_to_list(T), "_frag") =:= nomatch.

%%% ------------------------------------------------------------- helpers

%% A CRDT table's copy writes a key's row once per epoch: with an epoch of a minute, rows
%% stay behind during the test, and every read must come from the table's process. The node
%% that took an update shows it as soon as update/3 returned; `op' copies apply a member's
%% update at once and show it too; a node without a copy of a partitioned table's key reads
%% an owner's copy the same way.
read_your_writes(Config) ->
    Long = 60000,
    [begin
         Tab = list_to_atom(lists:concat(["c_ryw_", F, "_", L])),
         {atomic, ok} = call(1, Config, hypermnesia, create_table,
                             [Tab, [{crdt, awset}, {flavor, F}, {epoch, Long}
                                    | layout_opts(L, Config)]]),
         Frag = call(1, Config, hm_ec_frag, fragment_table, [Tab, k]),
         [Holder | _] = [I || I <- [1, 2, 3],
                              call(I, Config, hm_ec_frag, is_local, [Frag])],
         [ok = call(Holder, Config, hypermnesia, update, [Tab, k, {add, E}])
          || E <- lists:seq(1, 50)],
         ?assertEqual(lists:seq(1, 50), value(Holder, Config, Tab, k)),
         %% the row is behind: the value came from the table's process
         ?assertEqual([], call(Holder, Config, mnesia, dirty_read, [Frag, k])),
         ?assertEqual(lists:seq(1, 50), call(Holder, Config, hypermnesia, get_set, [Tab, k])),
         case F of
             op -> converged(Config, Tab, [{k, lists:seq(1, 50)}]);
             _ -> ok
         end
     end || F <- [op, delta], L <- [replicated, partitioned]],
    ok.

call(I, Config, M, F, A) -> hm_cluster:call(?config(cluster, Config), I, M, F, A).

pool(Config) -> hm_cluster:nodes(?config(cluster, Config)).

up(Config) -> [I || I <- hm_cluster:ids(?config(cluster, Config)),
                    hm_cluster:status(?config(cluster, Config), I) =:= up].

tab(Type, Flavor, Layout) ->
    list_to_atom(lists:concat(["c_", Type, "_", Flavor, "_", Layout])).

layout_opts(replicated, Config) -> [{ram_copies, pool(Config)}];
layout_opts(partitioned, Config) ->
    [{frag_properties, [{n_fragments, 4}, {n_ram_copies, 2}, {node_pool, pool(Config)}]}].

create(Config, Type, Flavor, Layout) ->
    Tab = tab(Type, Flavor, Layout),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{crdt, Type}, {flavor, Flavor} | layout_opts(Layout, Config)]]),
    Tab.

value(I, Config, Tab, Key) -> call(I, Config, hypermnesia, value, [Tab, Key]).

%% Every node that is up shows `Expected' for every key (else the test fails with what
%% each node shows). `{one_of, Vs}': the same value on every node, one of `Vs'.
converged(Config, Tab, Expected) ->
    Shown = fun() -> [{I, Key, value(I, Config, Tab, Key)} || {Key, _} <- Expected,
                                                              I <- up(Config)] end,
    Fits = fun({one_of, Vs}, Key, All) ->
                   case lists:usort([V || {_, K, V} <- All, K =:= Key]) of
                       [V] -> lists:member(V, Vs);
                       _ -> false
                   end;
              (V, Key, All) -> lists:all(fun({_, K, W}) -> K =/= Key orelse W =:= V end, All)
           end,
    Ok = fun() -> All = Shown(),
                  lists:all(fun({Key, E}) -> Fits(E, Key, All) end, Expected) end,
    try hm_cluster:wait_until(Ok, 60000)
    catch error:{timeout, _, _} -> ct:fail({not_converged, Tab, Expected, Shown()})
    end.

%% Two concurrent updates per type, one per side of a cut, and what every node must show
%% once healed: {KeyUpdates side 1, side 2, expected value}.
scenario(gcounter) -> {[{increment, 2}, {increment, 1}], [{increment, 5}], 8};
scenario(pncounter) -> {[{increment, 4}, {decrement, 1}], [{decrement, 7}], -4};
scenario(awset) -> {[{add, a}, {add, b}], [{add, c}], [a, b, c]};
scenario(rwset) -> {[{add, a}, {add, b}], [{add, c}], [a, b, c]};
scenario(mvreg) -> {[{assign, x}], [{assign, y}], [x, y]};
scenario(ewflag) -> {[enable], [disable], true};
scenario(lwwreg) -> {[{assign, x, 10}], [{assign, y, 20}], y};
scenario(map) -> {[{update, f, gcounter, {increment, 3}}],
                  [{update, g, awset, {add, e}}],
                  [{f, gcounter, 3}, {g, awset, [e]}]}.

%% What every node must show after the heal. An update taken where no owner of the key is
%% reachable is kept as a hint and applied once an owner is back: it then follows what that
%% owner has seen, so on a partitioned table a multi-value register may show only it.
after_heal(mvreg, Tab) ->
    case lists:suffix("partitioned", atom_to_list(Tab)) of
        true -> {one_of, [[x], [y], [x, y]]};
        false -> [x, y]
    end;
after_heal(T, _Tab) -> element(3, scenario(T)).

%%% ------------------------------------------------------------- cases

%% Every type and flavor, replicated: update on one node, read on every other; bad
%% operations refused with nothing changed; absent keys read as the empty value.
api_and_errors(Config) ->
    Empty = #{gcounter => 0, pncounter => 0, awset => [], rwset => [], lwwreg => undefined,
              mvreg => [], ewflag => false, map => []},
    lists:foreach(
      fun({Type, Flavor}) ->
              Tab = create(Config, Type, Flavor, replicated),
              ?assertEqual(maps:get(Type, Empty), value(2, Config, Tab, absent)),
              {Ups, _, _} = scenario(Type),
              [ok = call(2, Config, hypermnesia, update, [Tab, k, Op]) || Op <- Ups],
              {error, {bad_op, Type, {bogus, 1}}} =
                  call(3, Config, hypermnesia, update, [Tab, k, {bogus, 1}]),
              Expected = expected(Type, Ups),
              ok = converged(Config, Tab, [{k, Expected}]),
              %% still the same after the refused operation reached nobody
              ?assertEqual(Expected, value(1, Config, Tab, k))
      end, [{T, F} || T <- hm_crdt:types(), F <- hm_crdt:flavors()]),
    {aborted, {bad_crdt_option, c_x, {crdt, nope}}} =
        call(1, Config, hypermnesia, create_table, [c_x, [{crdt, nope}]]),
    {aborted, {bad_crdt_option, c_x, {flavor, nope}}} =
        call(1, Config, hypermnesia, create_table, [c_x, [{crdt, awset}, {flavor, nope}]]),
    {aborted, {bad_crdt_option, c_x, {attributes, _}}} =
        call(1, Config, hypermnesia, create_table, [c_x, [{crdt, awset}, {attributes, [a, b]}]]),
    {error, {not_crdt_table, nosuch}} = call(1, Config, hypermnesia, update, [nosuch, k, enable]),
    {error, {not_crdt_table, nosuch}} = call(1, Config, hypermnesia, value, [nosuch, k]),
    ok.

%% A value updated at one copy only, as the scenario's first side does.
expected(Type, Ups) ->
    C = lists:foldl(fun(Op, Acc) -> {ok, Acc1, _} = hm_crdt:mutate(Op, r, Acc), Acc1 end,
                    hm_crdt:new(Type, op), Ups),
    hm_crdt:value(C).

%% ChiaVe's client calls on a partitioned table, from a node that holds no copy of some keys.
conveniences(Config) ->
    C = create(Config, gcounter, op, partitioned),
    P = create(Config, pncounter, delta, partitioned),
    S = create(Config, awset, state, partitioned),
    R = create(Config, lwwreg, op, partitioned),
    Keys = lists:seq(1, 8),
    [begin
         ok = call(1, Config, hypermnesia, increment, [C, K]),
         ok = call(2, Config, hypermnesia, increment, [C, K, 4]),
         ok = call(3, Config, hypermnesia, decrement, [P, K]),
         ok = call(1, Config, hypermnesia, decrement, [P, K, 2]),
         ok = call(2, Config, hypermnesia, add_set, [S, K, a]),
         ok = call(2, Config, hypermnesia, add_set, [S, K, b]),
         ok = call(2, Config, hypermnesia, remove_set, [S, K, a]),
         ok = call(3, Config, hypermnesia, put_register, [R, K, {v, K}])
     end || K <- Keys],
    {error, {bad_op, gcounter, {decrement, 1}}} = call(1, Config, hypermnesia, decrement, [C, 1]),
    %% a plain async_ec write is refused, on an owner of the key and on the node that is not
    %% one (where it must not become a hint either)
    Cl = ?config(cluster, Config),
    Owners = call(1, Config, hypermnesia, owners, [C, 1]),
    [NotOwner] = [I || I <- [1, 2, 3], not lists:member(hm_cluster:node(Cl, I), Owners)],
    Write = fun() ->
                    try hypermnesia:async_ec(fun() -> mnesia:write({C, 1, 7}) end)
                    catch exit:Why -> {exit, Why}
                    end
            end,
    [{exit, {aborted, {ec_write_failed, _, {crdt_table, _}}}} = hm_cluster:eval(Cl, I, Write)
     || I <- [1, 2, 3]],
    Frag = call(1, Config, hm_ec_frag, fragment_table, [C, 1]),
    [] = call(NotOwner, Config, hm_ec_hints, pending, [Frag]),
    hm_cluster:wait_until(
      fun() -> lists:all(fun(I) ->
                                 [call(I, Config, hypermnesia, get_counter, [C, K]) || K <- Keys]
                                     =:= [5 || _ <- Keys]
                                     andalso [call(I, Config, hypermnesia, get_counter, [P, K])
                                              || K <- Keys] =:= [-3 || _ <- Keys]
                                     andalso [call(I, Config, hypermnesia, get_set, [S, K])
                                              || K <- Keys] =:= [[b] || _ <- Keys]
                                     andalso [call(I, Config, hypermnesia, get_register, [R, K])
                                              || K <- Keys] =:= [{v, K} || K <- Keys]
                         end, [1, 2, 3])
      end, 60000).

%% Every type and flavor, replicated and partitioned: node 1 cut off from nodes 2 and 3,
%% concurrent updates on both sides (on the partitioned tables, those on a side without a
%% copy of the key's fragment are kept as hints), heal: every node converges to the value
%% the type's concurrent semantics give; counters equal the sum of the acknowledged updates.
partition_every_type(Config) ->
    Combos = [{T, op, L} || T <- hm_crdt:types(), L <- [replicated, partitioned]]
        ++ [{T, F, partitioned} || T <- [pncounter, awset, mvreg, map], F <- [state, delta]],
    Tabs = [{create(Config, T, F, L), T} || {T, F, L} <- Combos],
    Keys = [k1, k2, k3],
    ok = hm_cluster:cut(?config(cluster, Config), [1], [2, 3]),
    [begin
         {Side1, Side2, _} = scenario(T),
         [ok = call(1, Config, hypermnesia, update, [Tab, K, Op]) || K <- Keys, Op <- Side1],
         [ok = call(2, Config, hypermnesia, update, [Tab, K, Op]) || K <- Keys, Op <- Side2]
     end || {Tab, T} <- Tabs],
    ok = hm_cluster:heal(?config(cluster, Config)),
    [ok = converged(Config, Tab, [{K, after_heal(T, Tab)} || K <- Keys]) || {Tab, T} <- Tabs],
    ok.

%% A node killed while updates go on: the others keep taking them; once it is back (a ram
%% copy, empty: it catches up by state transfer) every node shows the full count: every
%% update acknowledged by a node that stayed up is counted.
node_killed(Config) ->
    C = ?config(cluster, Config),
    Tabs = [create(Config, gcounter, F, L) || F <- hm_crdt:flavors(),
                                              L <- [replicated, partitioned]],
    [ok = call(1, Config, hypermnesia, increment, [Tab, K]) || Tab <- Tabs, K <- [a, b]],
    %% a ram copy that dies loses what it took and had not sent yet (for state and delta,
    %% up to one broadcast epoch): the kill comes once these are everywhere
    [ok = converged(Config, Tab, [{a, 1}, {b, 1}]) || Tab <- Tabs],
    ok = hm_cluster:kill(C, 3),
    [ok = call(I, Config, hypermnesia, increment, [Tab, K, 2])
     || Tab <- Tabs, K <- [a, b], I <- [1, 2]],
    ok = hm_cluster:restart(C, 3),
    [ok = call(3, Config, hypermnesia, increment, [Tab, K, 10]) || Tab <- Tabs, K <- [a, b]],
    [ok = converged(Config, Tab, [{a, 15}, {b, 15}]) || Tab <- Tabs],
    ok.

%% Every type and flavor, a copy on each of the three nodes: node 3 updates (and the update
%% reaches everyone), node 1 is cut off from nodes 2 and 3, both sides update, node 3 is
%% killed (`kill -9') during the cut and node 2 goes on updating alone, the cut heals, node
%% 3 restarts (its ram copy empty: it catches up by state transfer) and updates again.
%% Then every copy shows the same value, the one the type's concurrent semantics give over
%% every acknowledged update.
partition_and_kill_every_type(Config) ->
    C = ?config(cluster, Config),
    Tabs = [{create(Config, T, F, replicated), T} || T <- hm_crdt:types(),
                                                     F <- hm_crdt:flavors()],
    [ok = call(3, Config, hypermnesia, update, [Tab, K, Op])
     || {Tab, T} <- Tabs, K <- [k1, k2], Op <- kill_steps(T, before)],
    [ok = converged(Config, Tab, [{K, kill_value(T, before)} || K <- [k1, k2]])
     || {Tab, T} <- Tabs],
    ok = hm_cluster:cut(C, [1], [2, 3]),
    [begin
         {Side1, Side2, _} = scenario(T),
         [ok = call(1, Config, hypermnesia, update, [Tab, K, Op]) || K <- [k1, k2], Op <- Side1],
         [ok = call(2, Config, hypermnesia, update, [Tab, K, Op]) || K <- [k1, k2], Op <- Side2]
     end || {Tab, T} <- Tabs],
    %% node 2 must have sent its side's updates to node 3 or keep them: either way they
    %% survive node 3's death, since node 2 stays up
    ok = hm_cluster:kill(C, 3),
    [ok = call(2, Config, hypermnesia, update, [Tab, K, Op])
     || {Tab, T} <- Tabs, K <- [k1, k2], Op <- kill_steps(T, alone)],
    ok = hm_cluster:heal(C),
    ok = hm_cluster:restart(C, 3),
    %% node 3 back and caught up: every copy shows every acknowledged update so far
    [ok = converged(Config, Tab, [{K, kill_value(T, healed)} || K <- [k1, k2]])
     || {Tab, T} <- Tabs],
    [ok = call(3, Config, hypermnesia, update, [Tab, K, Op])
     || {Tab, T} <- Tabs, K <- [k1, k2], Op <- kill_steps(T, restarted)],
    [ok = converged(Config, Tab, [{K, kill_value(T, final)} || K <- [k1, k2]])
     || {Tab, T} <- Tabs],
    %% all copies compared: the whole state of every key, as each node's copy holds it
    [?assertEqual(1, length(lists:usort([[call(I, Config, hypermnesia, value, [Tab, K])
                                          || K <- [k1, k2]] || I <- [1, 2, 3]])))
     || {Tab, _} <- Tabs],
    ok.

%% Updates of the kill scenario: before the cut at node 3, at node 2 alone once node 3 is
%% dead, at node 3 once restarted (the scenario's two sides run in between).
kill_steps(T, before) when T =:= gcounter; T =:= pncounter -> [{increment, 100}];
kill_steps(T, alone) when T =:= gcounter; T =:= pncounter -> [{increment, 1000}];
kill_steps(T, restarted) when T =:= gcounter; T =:= pncounter -> [{increment, 10000}];
kill_steps(T, before) when T =:= awset; T =:= rwset -> [{add, z}];
kill_steps(T, alone) when T =:= awset; T =:= rwset -> [{remove, z}, {add, y}];
kill_steps(T, restarted) when T =:= awset; T =:= rwset -> [{add, x}];
kill_steps(lwwreg, before) -> [{assign, w, 5}];
kill_steps(lwwreg, alone) -> [{assign, v, 25}];
kill_steps(lwwreg, restarted) -> [{assign, u, 30}];
kill_steps(mvreg, restarted) -> [{assign, u}];
kill_steps(mvreg, _) -> [{assign, w}];
kill_steps(ewflag, before) -> [disable];
kill_steps(ewflag, alone) -> [enable];
kill_steps(ewflag, restarted) -> [];
kill_steps(map, before) -> [{update, h, ewflag, enable}];
kill_steps(map, alone) -> [{update, f, gcounter, {increment, 1}}];
kill_steps(map, restarted) -> [{update, g, awset, {add, d}}].

%% What every copy shows after the updates of kill_steps/2 up to `before', once node 3 is
%% back (`healed'), or after the whole scenario (`final').
kill_value(gcounter, before) -> 100;
kill_value(pncounter, before) -> 100;
kill_value(T, before) when T =:= awset; T =:= rwset -> [z];
kill_value(lwwreg, before) -> w;
kill_value(mvreg, before) -> [w];
kill_value(ewflag, before) -> false;
kill_value(map, before) -> [{h, ewflag, true}];
kill_value(gcounter, healed) -> 1108;
kill_value(pncounter, healed) -> 1096;
kill_value(T, healed) when T =:= awset; T =:= rwset -> [a, b, c, y];
kill_value(lwwreg, healed) -> v;
kill_value(mvreg, healed) -> [w, x];
kill_value(ewflag, healed) -> true;
kill_value(map, healed) -> [{f, gcounter, 4}, {g, awset, [e]}, {h, ewflag, true}];
kill_value(gcounter, final) -> 11108;
kill_value(pncounter, final) -> 11096;
kill_value(T, final) when T =:= awset; T =:= rwset -> [a, b, c, x, y];
kill_value(lwwreg, final) -> u;
kill_value(mvreg, final) -> [u];
kill_value(ewflag, final) -> true;
kill_value(map, final) -> [{f, gcounter, 4}, {g, awset, [d, e]}, {h, ewflag, true}].

%% `hypermnesia:start/1' with one configuration file on every node at once: each table is
%% created once, as the file says, and works from every node.
config_file(Config) ->
    File = filename:join(?config(priv_dir, Config), "cluster.config"),
    Terms = [{nodes, pool(Config)}, {fragments, 4}, {replication, 2}, {flavor, delta},
             {epoch, 50}, {crdt_tables, [{c_cfg_views, gcounter}, {c_cfg_tags, awset}]}],
    ok = file:write_file(File, [io_lib:format("~p.~n", [T]) || T <- Terms]),
    Self = self(),
    [spawn_link(fun() -> Self ! {started, I, call(I, Config, hypermnesia, start, [File])} end)
     || I <- [1, 2, 3]],
    [receive {started, I, R} -> ok = R after 60000 -> ct:fail({no_start, I}) end
     || I <- [1, 2, 3]],
    {ok, {gcounter, delta}} = call(3, Config, hm_crdt_table, spec, [c_cfg_views]),
    #{n_fragments := 4, n_copies := 2} =
        element(2, call(2, Config, hm_partition, properties, [c_cfg_tags])),
    [ok = call(I, Config, hypermnesia, increment, [c_cfg_views, home]) || I <- [1, 2, 3]],
    ok = call(2, Config, hypermnesia, add_set, [c_cfg_tags, post, erlang]),
    ok = converged(Config, c_cfg_views, [{home, 3}]),
    ok = converged(Config, c_cfg_tags, [{post, [erlang]}]).
