%% @doc Partitioned EC tables on five real nodes (OTP `peer', the shared harness
%% {@link hm_cluster}): placement on the ring, every access path from every node with and
%% without a local copy of the key's fragment, a real partition with writes on both sides
%% (hints where no owner is reachable), a node killed, and nodes added to and removed from
%% the pool under load with nothing acknowledged lost; a table with a foreign key whose
%% records live with their parent's.
-module(hm_partition_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([placement/1, access_from_every_node/1, partition_both_sides/1,
         dead_node_forgotten_and_replaced/1, dirty_writes_reach_their_fragment/1,
         dead_node_with_its_schema_in_ram_leaves_the_pool/1,
         add_and_remove_under_load/1, bad_options/1, key_value_api/1, foreign_key/1,
         info_and_status_of_the_whole_table/1]).
-export([writer/2, keys_written/1, failed_writes/1, rows_digest/1]).

-define(NODES, 5).
-define(F, 12).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [bad_options, placement, access_from_every_node, info_and_status_of_the_whole_table,
          key_value_api, foreign_key,
          partition_both_sides, add_and_remove_under_load, dirty_writes_reach_their_fragment,
          dead_node_with_its_schema_in_ram_leaves_the_pool, dead_node_forgotten_and_replaced].

init_per_suite(Config) ->
    C = hm_cluster:start(#{nodes => ?NODES, dir => ?config(priv_dir, Config), prefix => "partk",
                           modules => [?MODULE]}),
    [{cluster, C} | Config].

end_per_suite(Config) -> hm_cluster:stop(?config(cluster, Config)).

init_per_testcase(Case, Config) -> [{tab, Case} | Config].

end_per_testcase(_Case, Config) ->
    C = ?config(cluster, Config),
    hm_cluster:heal(C),
    _ = call(1, Config, hypermnesia, delete_table, [items(Config)]),
    _ = call(1, Config, hypermnesia, delete_table, [?config(tab, Config)]),
    ok.

%%% ------------------------------------------------------------- helpers

call(I, Config, M, F, A) -> hm_cluster:call(?config(cluster, Config), I, M, F, A).

ec(I, Config, Fun) -> call(I, Config, hypermnesia, async_ec, [Fun]).

ids(Config) -> [I || I <- hm_cluster:ids(?config(cluster, Config)),
                     hm_cluster:status(?config(cluster, Config), I) =:= up].

pool(Config) -> [hm_cluster:node(?config(cluster, Config), I) || I <- ids(Config)].

create(Config, Opts) ->
    Tab = ?config(tab, Config),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [id, val, tag]},
                               {frag_properties, [{n_fragments, ?F}, {n_ram_copies, 3},
                                                  {node_pool, pool(Config)}]} | Opts]]),
    Tab.

wait_until(F) -> hm_cluster:wait_until(F, 60000).

%% The table whose foreign key names the case's table.
items(Config) -> list_to_atom(atom_to_list(?config(tab, Config)) ++ "_items").

frag(Tab, 1) -> Tab;
frag(Tab, K) -> list_to_atom(atom_to_list(Tab) ++ "_frag" ++ integer_to_list(K)).

%% Every node reads the same rows, and they are `Expected' (sorted). Each node reads and
%% sums up its rows itself (how many, and the MD5 of their encoding), so a check costs one
%% read per node and no copy of the rows: with the writers of add_and_remove_under_load a
%% read of every row took seconds, and the checks alone used up the wait. Should they never
%% agree, the error shows what each node read last.
converged(Config, Tab, Expected) ->
    Want = digest(Expected),
    wait_until(fun() ->
                       Read = [{I, call(I, Config, ?MODULE, rows_digest, [Tab])} || I <- ids(Config)],
                       lists:all(fun({_, D}) -> D =:= Want end, Read)
                           orelse {expected, Want, read, Read}
               end).

%% Runs on a node: the digest of the rows `Tab' shows there inside async_ec, sorted.
rows_digest(Tab) ->
    digest(lists:sort(hypermnesia:async_ec(fun() -> mnesia:select(Tab, [{'_', [], ['$_']}]) end))).

digest(Rows) -> {length(Rows), erlang:md5(term_to_binary(Rows, [deterministic]))}.

%%% ------------------------------------------------------------- cases

bad_options(Config) ->
    Tab = ?config(tab, Config),
    Create = fun(FP, More) -> call(1, Config, hypermnesia, create_table,
                                   [Tab, [{type, pawset}, {frag_properties, FP} | More]])
             end,
    {aborted, {bad_ec_option, Tab, {frag_properties, {n_fragments, 0}}}} =
        Create([{n_fragments, 0}], []),
    {aborted, {bad_ec_option, Tab, {frag_properties, {hash_module, x}}}} =
        Create([{hash_module, x}], []),
    {aborted, {bad_ec_option, Tab, {ram_copies, _}}} =
        Create([{n_fragments, 2}], [{ram_copies, pool(Config)}]),
    {aborted, {combine_error, Tab, _}} =
        Create([{n_fragments, 2}, {n_ram_copies, 9}], []),
    {aborted, {not_active, Tab, nowhere@nohost}} =
        Create([{node_pool, [nowhere@nohost]}], []),
    {aborted, {bad_type, Tab, {node_pool, []}}} = Create([{node_pool, []}], []),
    false = call(1, Config, hypermnesia, is_ec_table, [Tab]),
    {error, {no_exists, Tab}} = call(1, Config, hypermnesia, owners, [Tab, 1]).

placement(Config) ->
    Tab = create(Config, []),
    Pool = pool(Config),
    %% every node gives the same owners, three distinct pool nodes, who hold the fragment
    Keys = lists:seq(1, 200),
    Owners = [call(I, Config, lists, map,
                   [fun(K) -> hypermnesia:owners(Tab, K) end, Keys]) || I <- ids(Config)],
    [O1] = lists:usort(Owners),
    true = lists:all(fun(Os) -> length(lists:usort(Os)) =:= 3 andalso Os -- Pool =:= [] end, O1),
    Frags = [list_to_atom(atom_to_list(Tab) ++ "_frag" ++ integer_to_list(K))
             || K <- lists:seq(2, ?F)],
    Holders = [lists:sort(call(1, Config, hm_ec_registry, copy_nodes, [Fr])) || Fr <- [Tab | Frags]],
    true = lists:all(fun(Hs) -> length(Hs) =:= 3 end, Holders),
    %% each key's owners are the holders of its fragment
    [true = lists:member(lists:sort(Os), Holders) || Os <- O1],
    %% every pool node holds some fragment, none all of them
    Counts = [length([Hs || Hs <- Holders, lists:member(N, Hs)]) || N <- Pool],
    ct:pal("copies per node: ~p", [Counts]),
    true = lists:all(fun(Cn) -> Cn > 0 andalso Cn < ?F end, Counts).

%% `hypermnesia:info(Tab)' and `cluster_info(Tab)' take a partitioned table as one table:
%% info sums this node's fragments (each row counted once per copy, so over the nodes it is
%% the copies times the rows), shows them one by one on request, and answers on a node
%% without any fragment; cluster_info covers every fragment.
info_and_status_of_the_whole_table(Config) ->
    Tab = ?config(tab, Config),
    [P1, P2, P3 | _] = pool(Config),
    {atomic, ok} = call(1, Config, hypermnesia, create_table,
                        [Tab, [{type, pawset}, {attributes, [id, val, tag]},
                               {frag_properties, [{n_fragments, ?F}, {n_ram_copies, 2},
                                                  {node_pool, [P1, P2, P3]}]}]]),
    Rows = [{Tab, K, K, x} || K <- lists:seq(1, 120)],
    ok = ec(4, Config, fun() -> lists:foreach(fun mnesia:write/1, Rows) end),
    converged(Config, Tab, Rows),
    Frags = [frag(Tab, K) || K <- lists:seq(1, ?F)],
    Sizes = [begin
                 Local = lists:sort([Fr || Fr <- Frags,
                                           call(I, Config, hm_ec_frag, is_local, [Fr])]),
                 #{table := Tab, n_fragments := ?F, status := ready, local_fragments := Local,
                   size := Size, fragments := ByFrag} =
                     call(I, Config, hypermnesia, info, [Tab, #{fragments => true}]),
                 Local = lists:sort(maps:keys(ByFrag)),
                 Size = lists:sum([S || #{size := S} <- maps:values(ByFrag)]),
                 false = maps:is_key(fragments, call(I, Config, hypermnesia, info, [Tab])),
                 Size
             end || I <- [1, 2, 3]],
    240 = lists:sum(Sizes),
    %% node 4 is not in the pool: no fragment here, the table is known all the same
    #{table := Tab, status := no_copy, local_fragments := [], size := 0, n_fragments := ?F,
      members := Holders} = call(4, Config, hypermnesia, info, [Tab]),
    [P1, P2, P3] = lists:sort(Holders),
    {error, {bad_option, {fragments, yes}}} =
        call(4, Config, hypermnesia, info, [Tab, #{fragments => yes}]),
    #{converged := true, tables := Tables} = call(4, Config, hypermnesia, cluster_info, [Tab]),
    true = lists:sort(Frags) =:= lists:sort(maps:keys(Tables)),
    [Tab] = lists:usort([B || #{fragment_of := B} <- maps:values(Tables)]),
    ok = call(4, Config, hypermnesia, wait_converged, [Tab, 10000]).

access_from_every_node(Config) ->
    Tab = create(Config, [{index, [tag]}]),
    Ids = ids(Config),
    %% every node writes 40 keys; some fragments are here, most are not
    [ok = ec(I, Config, fun() ->
                                [mnesia:write({Tab, {I, K}, K, K rem 3}) || K <- lists:seq(1, 40)],
                                ok
                        end) || I <- Ids],
    Expected = lists:sort([{Tab, {I, K}, K, K rem 3} || I <- Ids, K <- lists:seq(1, 40)]),
    converged(Config, Tab, Expected),
    N = length(Expected),
    [begin
         %% read of every key, local or not
         Read = ec(I, Config, fun() -> lists:append([mnesia:read(Tab, element(2, R))
                                                       || R <- Expected]) end),
         Expected = lists:sort(Read),
         %% match_object, index_read, all_keys, folds, size
         Match = ec(I, Config, fun() -> mnesia:match_object({Tab, '_', '_', 1}) end),
         Match = [R || R <- Match, element(4, R) =:= 1],
         true = length(Match) > 0,
         Index = ec(I, Config, fun() -> mnesia:index_read(Tab, 2, tag) end),
         true = lists:sort(Index) =:= [R || R <- Expected, element(4, R) =:= 2],
         N = length(ec(I, Config, fun() -> mnesia:all_keys(Tab) end)),
         N = ec(I, Config, fun() -> mnesia:foldl(fun(_, A) -> A + 1 end, 0, Tab) end),
         N = ec(I, Config, fun() -> mnesia:table_info(Tab, size) end),
         %% select with a limit and its continuations
         Chunks = ec(I, Config, fun() -> chunks(mnesia:select(Tab, [{'_', [], ['$_']}], 7, read))
                                end),
         Expected = lists:sort(Chunks),
         %% first/next visit every key once
         Walk = ec(I, Config, fun() -> walk(Tab, mnesia:first(Tab)) end),
         N = length(lists:usort(Walk)),
         N = length(Walk)
     end || I <- Ids],
    %% deletes from a node, delete_object from another, clear_table from a third
    [I1, I2, I3 | _] = Ids,
    ok = ec(I1, Config, fun() -> mnesia:delete({Tab, {I2, 1}}) end),
    ok = ec(I2, Config, fun() -> mnesia:delete_object({Tab, {I3, 2}, 2, 2}) end),
    converged(Config, Tab, Expected -- [{Tab, {I2, 1}, 1, 1}, {Tab, {I3, 2}, 2, 2}]),
    {atomic, ok} = ec(I3, Config, fun() -> mnesia:clear_table(Tab) end),
    converged(Config, Tab, []).

%% A table with `{foreign_key, {Tab, owner}}' (2 copies, the parent 3): fragment K of it is
%% held by nodes holding the parent's fragment K, so every record is on a node together with
%% its parent's record; `{Items, Owner}' reads and deletes in one fragment from any node; a
%% pool change is made on the parent and moves both; Mnesia's refusals.
foreign_key(Config) ->
    Tab = create(Config, []),
    Items = items(Config),
    Create = fun(FP) -> call(1, Config, hypermnesia, create_table,
                             [Items, [{type, pawset}, {attributes, [id, owner, n]},
                                      {frag_properties, FP}]])
             end,
    {aborted, {bad_ec_option, Items, {frag_properties, {foreign_key, {nope, owner}}}}} =
        Create([{foreign_key, {nope, owner}}]),
    {aborted, {combine_error, Items, {n_fragments, 3}, Tab, {n_fragments, ?F}}} =
        Create([{foreign_key, {Tab, owner}}, {n_fragments, 3}]),
    {aborted, {not_supported, Items, {dotted_replication, foreign_key}}} =
        call(1, Config, hypermnesia, create_table,
             [Items, [{type, pawset}, {attributes, [id, owner, n]}, {replication, dotted},
                      {frag_properties, [{foreign_key, {Tab, owner}}]}]]),
    {atomic, ok} = Create([{foreign_key, {Tab, owner}}, {n_ram_copies, 2}]),
    Colocated = fun() ->
                        lists:all(fun(K) ->
                                          P = call(1, Config, hm_ec_registry, copy_nodes,
                                                   [frag(Tab, K)]),
                                          I = call(1, Config, hm_ec_registry, copy_nodes,
                                                   [frag(Items, K)]),
                                          length(I) =:= 2 andalso I -- P =:= []
                                  end, lists:seq(1, ?F))
                end,
    true = Colocated(),
    %% parents and items written from every node
    Owners = lists:seq(1, 20),
    Ids = ids(Config),
    [ok = ec(I, Config, fun() -> mnesia:write({Tab, O, I, x}) end) || {I, O} <- spread(Ids, Owners)],
    Rows = [{Items, {O, J}, O, J} || O <- Owners, J <- [1, 2, 3]],
    [ok = ec(I, Config, fun() -> mnesia:write(R) end) || {I, R} <- spread(Ids, Rows)],
    converged(Config, Items, lists:sort(Rows)),
    %% on every holder of an item's fragment, the item and its parent are both local
    [begin
         K = call(1, Config, hm_ec_frag, fragment, [O, ?F]),
         [_ | _] = Holders = call(1, Config, hm_ec_registry, copy_nodes, [frag(Items, K)]),
         [begin
              [R] = call(1, Config, rpc, call, [H, mnesia, dirty_read, [frag(Items, K), Id]]),
              [_] = call(1, Config, rpc, call, [H, mnesia, dirty_read, [frag(Tab, K), O]])
          end || H <- Holders]
     end || R = {_, Id, O, _} <- Rows],
    %% the mnesia_frag names, from every node: one fragment, or all of them for a plain name
    [begin
         [{Items, {7, 2}, 7, 2}] = ec(I, Config, fun() -> mnesia:read({Items, 7}, {7, 2}) end),
         [{Items, {7, 2}, 7, 2}] = ec(I, Config, fun() -> mnesia:read(Items, {7, 2}) end),
         [] = ec(I, Config, fun() -> mnesia:read({Items, 8}, {7, 2}) end),
         %% table_info of {Tab, Key}: the fragment of Key (its copies), the size of all
         Owners7 = lists:sort(call(1, Config, hypermnesia, owners, [Tab, 7])),
         [_, _] = Where = ec(I, Config, fun() -> mnesia:table_info({Items, 7}, ram_copies) end),
         [] = Where -- Owners7,
         Owners7 = lists:sort(ec(I, Config, fun() -> mnesia:table_info({Tab, 7}, ram_copies)
                                            end)),
         60 = ec(I, Config, fun() -> mnesia:table_info({Items, 7}, size) end),
         {refused, {combine_error, Tab, frag_properties, {foreign_key, undefined}}} =
             ec(I, Config, fun() -> try mnesia:read({Tab, 7}, 7)
                                    catch exit:{aborted, Why} -> {refused, Why}
                                    end
                           end)
     end || I <- Ids],
    [I1, I2 | _] = Ids,
    ok = ec(I1, Config, fun() -> mnesia:delete({Items, 7}, {7, 2}, write) end),
    ok = ec(I2, Config, fun() -> mnesia:delete({Items, {8, 1}}) end),
    ok = ec(I2, Config, fun() -> mnesia:delete_object({Items, {9, 1}, 9, 1}) end),
    Left = lists:sort(Rows) -- [{Items, {7, 2}, 7, 2}, {Items, {8, 1}, 8, 1}, {Items, {9, 1}, 9, 1}],
    converged(Config, Items, Left),
    {error, {not_supported, {foreign_key, Items}}} =
        call(1, Config, hypermnesia, get, [Items, {1, 1}, []]),
    %% pool changes go through the parent, and move both tables
    C = ?config(cluster, Config),
    Last = hm_cluster:node(C, lists:last(Ids)),
    {aborted, {combine_error, Items, "Op only allowed via foreign table", _}} =
        call(1, Config, hypermnesia, change_table_frag, [Items, {del_node, Last}]),
    {aborted, {combine_error, Tab, "Too many foreigners", [Items]}} =
        call(1, Config, hypermnesia, delete_table, [Tab]),
    {atomic, ok} = call(1, Config, hypermnesia, change_table_frag, [Tab, {del_node, Last}]),
    true = Colocated(),
    false = lists:any(fun(K) -> lists:member(Last, call(1, Config, hm_ec_registry, copy_nodes,
                                                        [frag(Items, K)]))
                      end, lists:seq(1, ?F)),
    converged(Config, Items, Left),
    {atomic, ok} = call(1, Config, hypermnesia, change_table_frag, [Tab, {add_node, Last}]),
    true = Colocated(),
    converged(Config, Items, Left),
    {atomic, ok} = call(1, Config, hypermnesia, delete_table, [Items]),
    false = call(1, Config, hypermnesia, is_ec_table, [Items]).

%% Each element with the node that writes it, round robin.
spread(Ids, Xs) ->
    [{lists:nth(N rem length(Ids) + 1, Ids), X} || {N, X} <- lists:zip(lists:seq(1, length(Xs)), Xs)].

%% get/put/delete with contexts on a siblings table: concurrent puts by two holders of the
%% key on either side of a cut come back as siblings; a put with the context of the get that
%% saw them replaces exactly those; a delete with a context leaves a write it had not seen.
key_value_api(Config) ->
    Tab = create(Config, [{conflict, siblings}]),
    C = ?config(cluster, Config),
    Id = fun(Node) -> hd([I || I <- ids(Config), hm_cluster:node(C, I) =:= Node]) end,
    [O1, O2, _] = [Id(N) || N <- call(1, Config, hypermnesia, owners, [Tab, k])],
    {ok, [], Ctx0} = call(1, Config, hypermnesia, get, [Tab, k, []]),
    ok = call(1, Config, hypermnesia, put, [Tab, {Tab, k, v0, x}, Ctx0, []]),
    wait_until(fun() -> element(2, call(5, Config, hypermnesia, get, [Tab, k, [{r, 3}]]))
                            =:= [{Tab, k, v0, x}] end),
    {ok, [{Tab, k, v0, x}], Ctx1} = call(2, Config, hypermnesia, get, [Tab, k, [{r, 2}]]),
    ok = hm_cluster:cut(C, [O1], ids(Config) -- [O1]),
    ok = call(O1, Config, hypermnesia, put, [Tab, {Tab, k, left, x}, Ctx1, []]),
    ok = call(O2, Config, hypermnesia, put, [Tab, {Tab, k, right, x}, Ctx1, []]),
    ok = hm_cluster:heal(C),
    Both = [{Tab, k, left, x}, {Tab, k, right, x}],
    wait_until(fun() -> lists:all(fun(I) -> element(2, call(I, Config, hypermnesia, get,
                                                            [Tab, k, []])) =:= Both
                                  end, ids(Config)) end),
    {ok, Both, Ctx2} = call(3, Config, hypermnesia, get, [Tab, k, [{r, 3}]]),
    ok = call(5, Config, hypermnesia, put, [Tab, {Tab, k, merged, x}, Ctx2, [{w, 2}]]),
    wait_until(fun() -> lists:all(fun(I) -> element(2, call(I, Config, hypermnesia, get,
                                                            [Tab, k, []])) =:= [{Tab, k, merged, x}]
                                  end, ids(Config)) end),
    %% a delete with a stale context leaves what it had not seen
    {ok, _, Stale} = call(2, Config, hypermnesia, get, [Tab, k, []]),
    ok = call(1, Config, hypermnesia, put, [Tab, {Tab, k, newer, x}, Stale, [{w, 3}]]),
    ok = call(2, Config, hypermnesia, delete, [Tab, k, Stale, [{w, 3}]]),
    wait_until(fun() -> element(2, call(4, Config, hypermnesia, get, [Tab, k, [{r, 3}]]))
                            =:= [{Tab, k, newer, x}] end),
    ok = call(2, Config, hypermnesia, delete, [Tab, k, undefined, [{w, 3}]]),
    wait_until(fun() -> element(2, call(4, Config, hypermnesia, get, [Tab, k, [{r, 3}]])) =:= []
               end),
    %% errors
    {error, {bad_context, <<"junk">>}} = call(1, Config, hypermnesia, put,
                                              [Tab, {Tab, k, v, x}, <<"junk">>, []]),
    {error, {bad_type, {other, k}}} = call(1, Config, hypermnesia, put,
                                           [Tab, {other, k}, undefined, []]),
    {error, {bad_option, {r, 0}}} = call(1, Config, hypermnesia, get, [Tab, k, [{r, 0}]]),
    {error, {insufficient_replicas, 4, 3}} = call(1, Config, hypermnesia, get,
                                                  [Tab, k, [{r, 4}]]),
    {error, {not_ec_table, nope}} = call(1, Config, hypermnesia, get, [nope, k, []]).

chunks('$end_of_table') -> [];
chunks({Rs, Cont}) -> Rs ++ chunks(mnesia:select(Cont)).

walk(_Tab, '$end_of_table') -> [];
walk(Tab, K) -> [K | walk(Tab, mnesia:next(Tab, K))].

partition_both_sides(Config) ->
    Tab = create(Config, []),
    C = ?config(cluster, Config),
    ok = hm_cluster:cut(C, [1, 2], [3, 4, 5]),
    %% both sides write keys of every fragment (hints where every owner is on the other side)
    Keys = lists:seq(1, 60),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, left, x}) || K <- Keys], ok end),
    ok = ec(4, Config, fun() -> [mnesia:write({Tab, K + 100, right, x}) || K <- Keys], ok end),
    %% each side reads its own writes at once, hints included
    Left = lists:sort([{Tab, K, left, x} || K <- Keys]),
    Right = lists:sort([{Tab, K + 100, right, x} || K <- Keys]),
    Left = lists:sort(ec(1, Config, fun() -> [R || K <- Keys, R <- mnesia:read(Tab, K)] end)),
    Right = lists:sort(ec(4, Config, fun() -> [R || K <- Keys, R <- mnesia:read(Tab, K + 100)]
                                      end)),
    Hints = call(1, Config, hypermnesia, info, []),
    ct:pal("hints on node 1 during the cut: ~p", [maps:get(hints, Hints)]),
    ok = hm_cluster:heal(C),
    converged(Config, Tab, lists:sort(Left ++ Right)),
    %% node 1 alone: a sync_ec write that no holder on its side takes (a fragment without a
    %% copy there) is kept as a hint and not acknowledged (a hint takes the context of the
    %% holder it is handed off to, later); the others are acknowledged by node 1's copy
    ok = hm_cluster:cut(C, [1], [2, 3, 4, 5]),
    SyncKeys = lists:seq(201, 260),
    Synced = [{K, hm_check:outcome(
                    fun() -> call(1, Config, hypermnesia, sync_ec,
                                  [fun() -> mnesia:write({Tab, K, sync, x}) end])
                    end)} || K <- SyncKeys],
    ct:pal("sync_ec writes on node 1 alone: ~p", [Synced]),
    [] = [S || S = {_, R} <- Synced, R =/= ok, not hinted(Tab, R)],
    true = lists:any(fun({_, R}) -> hinted(Tab, R) end, Synced),
    true = lists:member(ok, [R || {_, R} <- Synced]),
    ok = hm_cluster:heal(C),
    %% ... and handed off after the heal, as the others
    Sync = [{Tab, K, sync, x} || K <- SyncKeys],
    converged(Config, Tab, lists:sort(Left ++ Right ++ Sync)),
    wait_until(fun() -> [0] =:= lists:usort([maps:get(hints, call(I, Config, hypermnesia, info,
                                                                   [])) || I <- ids(Config)])
               end).

%% A sync_ec write kept as a hint, as the caller sees it (naming the key's fragment).
hinted(Tab, {exit, {aborted, {ec_write_failed, Frag, {hinted, Frag}}}}) ->
    lists:prefix(atom_to_list(Tab), atom_to_list(Frag));
hinted(_, _) -> false.

%% A node whose schema is in RAM dies: it leaves the pool by change_table_frag/2 while down
%% (Mnesia lets a copy on such a node go), each fragment it held gets its third copy back
%% on the nodes that are up, from what they hold, nothing written before or meanwhile is
%% missing, and the fragments' copies stop waiting for it (nothing stays unstable).
dead_node_with_its_schema_in_ram_leaves_the_pool(Config) ->
    C = ?config(cluster, Config),
    I = hm_cluster:add_node(C, #{schema => ram_copies}),
    Dead = hm_cluster:node(C, I),
    Tab = create(Config, []),
    Keys = lists:seq(1, 100),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, a, x}) || K <- Keys], ok end),
    converged(Config, Tab, lists:sort([{Tab, K, a, x} || K <- Keys])),
    Held = [K || K <- lists:seq(1, ?F),
                 lists:member(Dead, call(1, Config, hm_ec_registry, copy_nodes, [frag(Tab, K)]))],
    true = Held =/= [],
    ok = hm_cluster:kill(C, I),
    ok = ec(2, Config, fun() -> [mnesia:write({Tab, K, b, x}) || K <- Keys], ok end),
    Rows = lists:sort([{Tab, K, b, x} || K <- Keys]),
    converged(Config, Tab, Rows),
    {atomic, ok} = call(1, Config, hypermnesia, change_table_frag, [Tab, {del_node, Dead}]),
    Up = pool(Config),
    false = lists:member(Dead, Up),
    {ok, #{pool := Up}} = call(1, Config, hm_partition, properties, [Tab]),
    [{3, []}] = copies_per_fragment(Config, Tab, Up),
    converged(Config, Tab, Rows),
    ok = ec(3, Config, fun() -> [mnesia:write({Tab, K, c, x}) || K <- Keys], ok end),
    converged(Config, Tab, lists:sort([{Tab, K, c, x} || K <- Keys])),
    Quiet = fun(J) ->
                    #{fragments := ByFrag} = call(J, Config, hypermnesia, info,
                                                  [Tab, #{fragments => true}]),
                    lists:all(fun(#{unstable_keys := 0, members := Ms}) ->
                                      not lists:member(Dead, Ms);
                                 (_) -> false
                              end, maps:values(ByFrag))
            end,
    wait_until(fun() -> lists:all(Quiet, ids(Config)) end),
    %% it leaves the cluster too, as a dead node with its schema in RAM may
    {atomic, ok} = call(1, Config, mnesia, del_table_copy, [schema, Dead]).

%% Per fragment: how many copies it has, and the nodes holding one outside `Up'.
copies_per_fragment(Config, Tab, Up) ->
    lists:usort([begin
                     Holders = call(1, Config, hm_ec_registry, copy_nodes, [frag(Tab, K)]),
                     {length(Holders), Holders -- Up}
                 end || K <- lists:seq(1, ?F)]).

%% A node killed: every key stays readable and writable (two owners of three are up); it
%% cannot leave the pool by change_table_frag/2 while down (its schema is on disc, and
%% Mnesia changes the copies of a table only while such holders run); taken for dead, it is
%% forgotten
%% (hypermnesia:forget_node/1): each fragment it held gets its third copy back on the nodes
%% that are up, from what they hold, and nothing written before or meanwhile is missing.
dead_node_forgotten_and_replaced(Config) ->
    Tab = create(Config, []),
    C = ?config(cluster, Config),
    Keys = lists:seq(1, 100),
    ok = ec(1, Config, fun() -> [mnesia:write({Tab, K, a, x}) || K <- Keys], ok end),
    converged(Config, Tab, lists:sort([{Tab, K, a, x} || K <- Keys])),
    Gone = hm_cluster:node(C, ?NODES),
    ok = hm_cluster:kill(C, ?NODES),
    ok = ec(2, Config, fun() -> [mnesia:write({Tab, K, b, x}) || K <- Keys], ok end),
    Rows = lists:sort([{Tab, K, b, x} || K <- Keys]),
    converged(Config, Tab, Rows),
    {aborted, {not_active, Tab, Gone}} =
        call(1, Config, hypermnesia, change_table_frag, [Tab, {del_node, Gone}]),
    {atomic, ok} = call(1, Config, hypermnesia, forget_node, [Gone]),
    false = lists:member(Gone, call(1, Config, mnesia, system_info, [db_nodes])),
    Up = pool(Config),
    {ok, #{pool := Up}} = call(1, Config, hm_partition, properties, [Tab]),
    [{3, []}] = copies_per_fragment(Config, Tab, Up),
    converged(Config, Tab, Rows),
    ok = ec(3, Config, fun() -> [mnesia:write({Tab, K, c, x}) || K <- Keys], ok end),
    Rows2 = lists:sort([{Tab, K, c, x} || K <- Keys]),
    converged(Config, Tab, Rows2).

%% Mnesia's dirty calls on a partitioned EC table, as code written for a plain table makes
%% them (on the table's name, which is its first fragment): each record ends in the
%% fragment its key hashes to, on every holder of it, and every node reads it; a dirty
%% delete removes it everywhere.
dirty_writes_reach_their_fragment(Config) ->
    Tab = create(Config, []),
    Keys = lists:seq(1, 60),
    Holder = hd([I || I <- ids(Config),
                      lists:member(hm_cluster:node(?config(cluster, Config), I),
                                   call(1, Config, hm_ec_registry, copy_nodes, [Tab]))]),
    [ok = call(Holder, Config, mnesia, dirty_write, [{Tab, K, dirty, x}]) || K <- Keys],
    converged(Config, Tab, lists:sort([{Tab, K, dirty, x} || K <- Keys])),
    %% no stray copy left in the first fragment of a key that hashes elsewhere
    Mine = [K || K <- Keys, call(1, Config, hm_ec_frag, fragment_table, [Tab, K]) =:= Tab],
    wait_until(fun() ->
                       lists:sort(call(Holder, Config, mnesia, dirty_all_keys, [Tab]))
                           =:= lists:sort(Mine)
               end),
    [ok = call(Holder, Config, mnesia, dirty_delete, [{Tab, K}]) || K <- Mine],
    converged(Config, Tab, lists:sort([{Tab, K, dirty, x} || K <- Keys -- Mine])).

add_and_remove_under_load(Config) ->
    Tab = create(Config, []),
    C = ?config(cluster, Config),
    Node5 = hm_cluster:node(C, 5),
    %% node 5 leaves the pool and comes back while nodes 1 and 2 write unique keys
    {atomic, ok} = call(3, Config, hypermnesia, change_table_frag, [Tab, {del_node, Node5}]),
    Writers = [spawn_writer(C, I, Tab) || I <- [1, 2]],
    wait_until(fun() -> length(keys_written_by(C, 1)) > 200 end),
    {atomic, ok} = call(3, Config, hypermnesia, change_table_frag, [Tab, {add_node, Node5}]),
    Node4 = hm_cluster:node(C, 4),
    {atomic, ok} = call(3, Config, hypermnesia, change_table_frag, [Tab, {del_node, Node4}]),
    {atomic, ok} = call(3, Config, hypermnesia, change_table_frag, [Tab, {add_node, Node4}]),
    [W ! stop || W <- Writers],
    [receive {done, W} -> ok after 60000 -> error(writer_stuck) end || W <- Writers],
    %% no write failed, and every acknowledged one is everywhere
    [] = failed_writes(C, 1) ++ failed_writes(C, 2),
    Written = lists:sort(keys_written_by(C, 1) ++ keys_written_by(C, 2)),
    ct:pal("acknowledged writes during the moves: ~p", [length(Written)]),
    converged(Config, Tab, [{Tab, K, v, x} || K <- Written]).

%% A writer on node I: unique keys, each recorded once its write returned.
spawn_writer(C, I, Tab) ->
    Parent = self(),
    W = spawn(fun() ->
                      ok = hm_cluster:call(C, I, ?MODULE, writer, [Tab, I]),
                      receive stop -> ok end,
                      hm_cluster:call(C, I, erlang, send, [{hp_writer, hm_cluster:node(C, I)},
                                                            stop]),
                      hm_cluster:wait_until(fun() -> hm_cluster:call(C, I, erlang, whereis,
                                                                     [hp_writer]) =:= undefined
                                            end, 60000),
                      Parent ! {done, self()}
              end),
    W.

keys_written_by(C, I) -> hm_cluster:call(C, I, ?MODULE, keys_written, [I]).

%% Runs on node I: a registered writer process that writes {I, N} for N = 1, 2, ... and
%% records each acknowledged key in an ETS table, until told to stop.
writer(Tab, I) ->
    Ets = list_to_atom("hp_written_" ++ integer_to_list(I)),
    Self = self(),
    Pid = spawn(fun() ->
                        register(hp_writer, self()),
                        _ = ets:new(Ets, [named_table, public]),
                        Self ! ready,
                        write_loop(Tab, I, Ets, 1)
                end),
    receive ready -> ok after 5000 -> error({writer_not_started, Pid}) end.

%% At most one write a millisecond: the moves of a fragment take seconds, and a writer
%% at full speed left hundreds of thousands of keys, enough for the checks that follow
%% (every row read on every node) to outlast their wait; thousands are written during the
%% moves either way.
write_loop(Tab, I, Ets, N) ->
    receive stop ->
            %% stopped: unregistered, and alive so that its table of keys stays
            unregister(hp_writer),
            receive die -> ok end
    after 1 ->
            try hypermnesia:async_ec(fun() -> mnesia:write({Tab, {I, N}, v, x}) end) of
                ok -> true = ets:insert(Ets, {{I, N}});
                Other -> true = ets:insert(Ets, {{failed, N}, Other})
            catch C:R -> true = ets:insert(Ets, {{failed, N}, {C, R}})
            end,
            write_loop(Tab, I, Ets, N + 1)
    end.

keys_written(I) ->
    Ets = list_to_atom("hp_written_" ++ integer_to_list(I)),
    [K || {K} <- ets:tab2list(Ets)].

failed_writes(C, I) -> hm_cluster:call(C, I, ?MODULE, failed_writes, [I]).

failed_writes(I) ->
    Ets = list_to_atom("hp_written_" ++ integer_to_list(I)),
    [F || F = {{failed, _}, _} <- ets:tab2list(Ets)].
