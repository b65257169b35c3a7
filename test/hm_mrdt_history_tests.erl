%% @doc Unit tests of the history layer and the types (after "Banyan: Coordination-free
%% Distributed Transactions over Mergeable Types"): the recursive merge of section 4.3
%% (Fig. 6) with its cache, the build cache of section 2 (Fig. 2), the linked log of section
%% 5.3, history collection (section 4.4) and the fully-received check (section 4.2).
-module(hm_mrdt_history_tests).
-include_lib("eunit/include/eunit.hrl").

-import(hm_mrdt_prop, [map_store/1, apply_writes/2, apply_plan/2, value/3]).

commit(Map, Base, Writes, Nonce) ->
    St0 = hm_mrdt_history:set_nonce(map_store(Map), Nonce),
    {T, St1} = hm_mrdt_commits:write_tree(St0, hm_mrdt_commits:tree_of(St0, Base), Writes),
    {C, St2} = hm_mrdt_commits:commit(St1, [B || B <- [Base], B =/= none], T),
    {apply_writes(Map, St2), C}.

merge(Map, A, B) ->
    {ok, M, St} = hm_mrdt_merge:merge_commits(map_store(Map), A, B),
    {apply_writes(Map, St), M}.

incr(Map, C, N) ->
    Old = case value(Map, C, x) of none -> 0; V -> V end,
    commit(Map, C, #{x => {hm_mrdt_counter, Old + N}}, make_ref()).

%% Fig. 6 and section 4.3: A and B increment by 4 and 5; A merges B; B increments by 5 and
%% merges A's older commit (a criss-cross: two LCAs, 4 and 5, merged recursively into 9, which
%% is cached); A increments by 3; merging A and B gives 4 + 5 + 5 + 3.
criss_cross_test() ->
    {M1, A1} = incr(#{}, none, 4),
    {M2, B1} = incr(M1, none, 5),
    {M3, A2} = merge(M2, A1, B1),
    ?assertEqual(9, value(M3, A2, x)),
    {M4, B2} = incr(M3, B1, 5),
    {M5, B3} = merge(M4, B2, A1),
    ?assertEqual(14, value(M5, B3, x)),
    {M6, A3} = incr(M5, A2, 3),
    ?assertEqual(lists:sort([A1, B1]), lists:sort(hm_mrdt_ancestry:lcas(map_store(M6), A3, B3))),
    {M7, AB} = merge(M6, A3, B3),
    {M8, BA} = merge(M7, B3, A3),
    ?assertEqual(17, value(M8, AB, x)),
    ?assertEqual(AB, BA),                    % the same merge makes the same commit
    ?assertEqual(A2, maps:get({cache, lists:sort([A1, B1])}, M8)),
    ?assertEqual([A3], hm_mrdt_ancestry:lcas(map_store(M8), AB, A3)).

lcas_test() ->
    {M1, A} = incr(#{}, none, 1),
    {M2, B} = incr(M1, A, 1),
    {M3, C} = incr(M2, A, 2),
    St = map_store(M3),
    ?assertEqual([A], hm_mrdt_ancestry:lcas(St, B, C)),
    ?assertEqual([A], hm_mrdt_ancestry:lcas(St, A, C)),
    ?assert(hm_mrdt_ancestry:is_ancestor(St, A, B)),
    ?assertNot(hm_mrdt_ancestry:is_ancestor(St, B, C)),
    {M4, D} = incr(#{}, none, 1),
    ?assertEqual([], hm_mrdt_ancestry:lcas(map_store(maps:merge(M3, M4)), B, D)).

%% Fig. 2: hits since the LCA add up.
build_cache_test() ->
    T = hm_mrdt_build_cache,
    Bin = <<"cmx">>,
    {M1, V1} = commit(#{}, none, #{stats => {T, {stats, 10, 10, 3}}, lib => {T, {artefact, Bin}}}, a),
    {M2, V3} = commit(M1, V1, #{stats => {T, {stats, 10, 20, 7}}}, b),
    {M3, V4} = commit(M2, V1, #{stats => {T, {stats, 10, 15, 5}}}, c),
    {M4, V5} = merge(M3, V3, V4),
    ?assertEqual({stats, 10, 20, 9}, value(M4, V5, stats)),
    ?assertEqual({artefact, Bin}, value(M4, V5, lib)),
    {M5, W} = commit(M4, V1, #{lib => {T, {artefact, <<"other">>}}}, d),
    {M6, W2} = commit(M5, V1, #{lib => {T, {artefact, <<"third">>}}}, e),
    ?assertMatch({conflict, {lib, {different_artefacts, _, _}}},
                 hm_mrdt_merge:merge_commits(map_store(M6), W, W2)).

linked_log_test() ->
    L = hm_mrdt_linked_log,
    {M1, C1} = commit(#{}, none, #{log => {L, L:update(none, {1, a})}}, a),
    Append = fun(M, C, E, N) ->
                     commit(M, C, #{log => {L, L:update(value(M, C, log), E)}}, N)
             end,
    {M2, A} = Append(M1, C1, {2, b}, b),
    {M3, B} = Append(M2, C1, {3, c}, c),
    {M4, AB} = merge(M3, A, B),
    St = map_store(M4),
    Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
    ?assertEqual([{3, c}, {2, b}, {1, a}], L:read(value(M4, AB, log), Fetch)),
    ?assertMatch({merge, [_, _]}, value(M4, AB, log)).

%% Collection keeps what the roots need, deletes the rest, and the roots read the same.
gc_test() ->
    {M, Head} = lists:foldl(fun(I, {Mp, C}) -> incr(Mp, C, I) end, {#{}, none}, lists:seq(1, 20)),
    {M1, Side} = incr(M, Head, 100),
    Plan = #{floor := Floor} = hm_mrdt_collect:gc_plan(map_store(M1), [Head, Side], []),
    ?assertEqual(Head, Floor),
    M2 = apply_plan(M1, Plan),
    ?assert(map_size(M2) < map_size(M1) div 4),
    ?assertEqual(210, value(M2, Head, x)),
    {M3, Merged} = merge(M2, Head, Side),
    ?assertEqual(310, value(M3, Merged, x)),
    %% a commit below the floor reads as already merged: no floor above it
    ?assertEqual(20, hm_mrdt_history:max_graft(map_store(M2)) + 1),
    %% nothing to collect twice
    ?assertMatch(#{delete := []}, hm_mrdt_collect:gc_plan(map_store(M2), [Head, Side], [])).

%% A merge shares every bucket only one side changed: merging two commits that each changed
%% a key of another bucket writes a commit and no leaf; keys of one bucket changed on both
%% sides make one new leaf. Either way the merge is one record: the commit, holding its tree
%% and, in its pack, the leaves it created.
merge_shares_leaves_test() ->
    Keys = lists:seq(1, 200),
    {M0, Base} = commit(#{}, none, maps:from_list([{K, {hm_mrdt_counter, 0}} || K <- Keys]), base),
    Bucket = fun(K) -> erlang:phash2(K, 64) end,
    [K1, K2 | _] = Keys,
    true = Bucket(K1) =/= Bucket(K2),
    [K3 | _] = [K || K <- Keys, K =/= K1, Bucket(K) =:= Bucket(K1)],
    {M1, A} = commit(M0, Base, #{K1 => {hm_mrdt_counter, 1}}, a),
    {M2, B} = commit(M1, Base, #{K2 => {hm_mrdt_counter, 2}}, b),
    NewBlocks = fun(Map, X, Y) ->
                        {ok, M, St} = hm_mrdt_merge:merge_commits(map_store(Map), X, Y),
                        [{{block, M}, Rec}] =
                            [W || {{block, _}, _} = W <- hm_mrdt_history:writes(St)],
                        {commit, _, _, _, Pack} = hm_mrdt_history:open_commit(Rec),
                        {M, lists:sort([element(1, Blk) || Blk <- maps:values(Pack)])}
                end,
    {AB, Written} = NewBlocks(M2, A, B),
    ?assertEqual([], Written),
    {M3, _} = merge(M2, A, B),
    ?assertEqual([{K1, 1}, {K2, 2}, {K3, 0}], [{K, value(M3, AB, K)} || K <- [K1, K2, K3]]),
    {M4, C} = commit(M3, Base, #{K3 => {hm_mrdt_counter, 3}}, c),
    {AC, Written2} = NewBlocks(M4, A, C),
    ?assertEqual([leaf], Written2),
    {M5, _} = merge(M4, A, C),
    ?assertEqual([{K1, 1}, {K2, 0}, {K3, 3}], [{K, value(M5, AC, K)} || K <- [K1, K2, K3]]).

%% A new leaf or blob carries a short mark of its step's nonce, whatever the nonce's size (a
%% group commit's nonce names every session of the group): two steps with large nonces
%% that differ still make blocks of different names, and a leaf of one small entry stays
%% small.
nonce_mark_test() ->
    Big = fun(Tag) -> {publish, node(), Tag, [make_ref() || _ <- lists:seq(1, 100)]} end,
    Leaf = fun(Nonce) ->
                   {_, C} = commit(#{}, none, #{k => {hm_mrdt_counter, 1},
                                                b => {hm_mrdt_blob_log, [{I, <<0:2048>>} || I <- [1, 2]]}},
                                   Nonce),
                   C
           end,
    {M, C1} = commit(#{}, none, #{k => {hm_mrdt_counter, 1}}, Big(a)),
    {commit, _, _, _, Pack} = hm_mrdt_history:open_commit(maps:get({block, C1}, M)),
    [L] = maps:values(Pack),
    ?assert(erlang:external_size(L) < 100),
    ?assertNotEqual(Leaf(Big(a)), Leaf(Big(a))),
    N = {merge, [<<1:256>>, <<2:256>>]},
    ?assertEqual(Leaf(N), Leaf(N)).

%% A commit's record is written with its tree and pack as binaries: a record of 64 leaves
%% is a few words of heap (the EC table copies it by reference), and opens to the tree and
%% pack the step made.
stored_commit_test() ->
    W = maps:from_list([{K, {hm_mrdt_blob_log, [{K, <<0:1024>>}]}} || K <- lists:seq(1, 500)]),
    {M, C} = commit(#{}, none, W, n),
    Rec = maps:get({block, C}, M),
    ?assertMatch({commit, [], T, 0, P} when is_binary(T) andalso is_binary(P), Rec),
    ?assert(erts_debug:flat_size(Rec) < 40),
    {commit, [], Tree, 0, Pack} = hm_mrdt_history:open_commit(Rec),
    ?assertEqual(64, map_size(Tree)),
    ?assertEqual(64, map_size(Pack)),               % a leaf per bucket, values inline
    ?assertEqual([{K, V} || {K, {_, V}} <- lists:sort(maps:to_list(W))],
                 [{K, value(M, C, K)} || K <- lists:seq(1, 500)]).

%% Writes made over one tree carried onto a newer one: an unchanged key keeps the written
%% value, a changed counter merges (LCA the old value), a key of another type conflicts,
%% and the overlay (writes of an earlier publish of the same group) counts as the newer side.
merge_writes_test() ->
    C = hm_mrdt_counter,
    {M1, Old} = commit(#{}, none, #{a => {C, 1}, b => {C, 10}, s => {hm_mrdt_set, []}}, old),
    {M2, New} = commit(M1, Old, #{b => {C, 15}, s => {hm_mrdt_set, [x]}}, new),
    St = map_store(M2),
    [TO, TN] = [hm_mrdt_commits:tree_of(St, X) || X <- [Old, New]],
    ?assertEqual({ok, #{a => {C, 2}, b => {C, 17}, n => {C, 5}}},
                 hm_mrdt_merge:merge_writes(St, TO, TN, #{a => {C, 2}, b => {C, 12}, n => {C, 5}})),
    ?assertEqual({conflict, {s, {type_mismatch, hm_mrdt_set, C}}},
                 hm_mrdt_merge:merge_writes(St, TO, TN, #{s => {C, 1}})),
    ?assertEqual({ok, #{a => {C, 8}}},
                 hm_mrdt_merge:merge_writes(St, TO, TN, #{a => {C, 4}}, #{a => {C, 5}})),
    ?assertEqual({ok, #{a => {C, 3}}}, hm_mrdt_merge:merge_writes(St, TN, TN, #{a => {C, 3}})).

%% Small values live in their leaf: two sides that reach the same value by two changes
%% (each adds 2) still merge with the type (5 + 2 + 2), not as one version.
equal_values_merge_test() ->
    {M1, L} = commit(#{}, none, #{x => {hm_mrdt_counter, 5}}, l),
    {M2, A} = commit(M1, L, #{x => {hm_mrdt_counter, 7}}, a),
    {M3, B} = commit(M2, L, #{x => {hm_mrdt_counter, 7}}, b),
    {M4, AB} = merge(M3, A, B),
    ?assertEqual(9, value(M4, AB, x)),
    %% a large value has a blob of its own
    Big = binary:copy(<<1>>, 1000),
    {M5, C} = commit(M4, AB, #{y => {hm_mrdt_set, [Big]}}, c),
    ?assertEqual([Big], value(M5, C, y)),
    {commit, _, _, _, Pack} = hm_mrdt_history:open_commit(maps:get({block, C}, M5)),
    ?assertMatch([_], [Blob || {blob, hm_mrdt_set, _, _} = Blob <- maps:values(Pack)]).

%% Two merges whose result equals what both their sides show (a counter at 0 reached two
%% ways) must not reuse one side's leaf: two later branches would then share that leaf with
%% different histories, and merging them would take the leaf as one version instead of
%% merging the two changes. Histories: 3: -1; 2: -1, +2; 3 merges 2; 1: 0; 3 merges 1;
%% 2: -1; merging all gives -1 + -1 + 2 + 0 - 1. Which side a merge reused depended on the
%% order of the hashes, so every nonce offset below is a different order.
equal_merges_keep_their_history_test() ->
    Run = fun(Off) ->
                  C = hm_mrdt_counter,
                  {M1, C1} = commit(#{}, none, #{x => {C, -1}}, {Off, 1}),
                  {M2, C2} = commit(M1, none, #{x => {C, -1}}, {Off, 2}),
                  {M3, C3} = commit(M2, C2, #{x => {C, 1}}, {Off, 3}),
                  {M4, X1} = merge(M3, C1, C3),
                  {M5, C4} = commit(M4, none, #{x => {C, 0}}, {Off, 4}),
                  {M6, X2} = merge(M5, X1, C4),
                  {M7, C5} = commit(M6, C3, #{x => {C, 0}}, {Off, 5}),
                  {M8, X3} = merge(M7, C4, C5),
                  {M9, All} = merge(M8, X3, X2),
                  value(M9, All, x)
          end,
    ?assertEqual([{Off, -1} || Off <- lists:seq(1, 40)],
                 [{Off, Run(Off)} || Off <- lists:seq(1, 40)]).

%% A linked log appended twice between publishes, and rebased over another session's append:
%% every value the published one refers to is stored, so the log reads whole from the public
%% branch and its commit counts as fully received.
linked_log_session_test() ->
    L = hm_mrdt_linked_log,
    Publish = fun(Map, N, Id, Sess) ->
                      M1 = maps:merge(Map, maps:from_list(hm_mrdt_session:objects(Sess))),
                      {ok, N1, St} = hm_mrdt_node:publish(N, map_store(M1), Id,
                                                          hm_mrdt_session:pending(Sess)),
                      {apply_writes(M1, St), N1}
              end,
    Write = fun(Map, Sess, E) ->
                    {ok, S1} = hm_mrdt_session:write(Sess, map_store(Map), log, L, E),
                    S1
            end,
    Read = fun(Map, N) ->
                   St = map_store(Map),
                   Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
                   Head = hm_mrdt_node:head(N),
                   {hm_mrdt_commits:complete(St, Head),
                    L:read(value(Map, Head, log), Fetch)}
           end,
    N0 = hm_mrdt_node:open(hm_mrdt_node:open(hm_mrdt_node:new(n1, none), s1, none), s2, none),
    S1 = Write(#{}, Write(#{}, hm_mrdt_session:new(s1, none), {1, a}), {2, b}),
    ?assertEqual({ok, [{2, b}, {1, a}]}, hm_mrdt_session:read(S1, map_store(#{}), log)),
    {M1, N1} = Publish(#{}, N0, s1, S1),
    ?assertEqual({true, [{2, b}, {1, a}]}, Read(M1, N1)),
    %% s2 appends twice on the empty base while s1 publishes, then refreshes and publishes
    S2 = Write(M1, Write(M1, hm_mrdt_session:new(s2, none), {3, c}), {4, d}),
    {ok, S2r} = hm_mrdt_session:rebase(S2, map_store(M1), hm_mrdt_node:head(N1)),
    N2 = hm_mrdt_node:open(N1, s2, hm_mrdt_node:head(N1)),
    {M2, N3} = Publish(M1, N2, s2, S2r),
    ?assertEqual({true, [{4, d}, {3, c}, {2, b}, {1, a}]}, Read(M2, N3)).

%% Two sessions of one node append to the same linked log on the same base; the second
%% publishes onto the branch the first moved, alone and as a group commit (of two and of
%% three sessions). The merge node
%% refers to the second session's pending value, which must be stored too: the log reads
%% whole and the commit counts as fully received (other nodes merge only such commits).
linked_log_publish_onto_moved_branch_test() ->
    L = hm_mrdt_linked_log,
    N0 = hm_mrdt_node:open(hm_mrdt_node:open(hm_mrdt_node:new(n1, none), s1, none), s2, none),
    Pending = fun(Id, E) ->
                      {ok, S} = hm_mrdt_session:write(hm_mrdt_session:new(Id, none),
                                                      map_store(#{}), log, L, E),
                      hm_mrdt_session:pending(S)
              end,
    Check = fun(Map, N) ->
                    St = map_store(Map),
                    Head = hm_mrdt_node:head(N),
                    Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
                    ?assertEqual(true, hm_mrdt_commits:complete(St, Head)),
                    ?assertEqual([{2, b}, {1, a}], L:read(value(Map, Head, log), Fetch))
            end,
    {ok, N1, St1} = hm_mrdt_node:publish(N0, map_store(#{}), s1, Pending(s1, {1, a})),
    M1 = apply_writes(#{}, St1),
    {ok, N2, St2} = hm_mrdt_node:publish(N1, map_store(M1), s2, Pending(s2, {2, b})),
    Check(apply_writes(M1, St2), N2),
    {N3, St3, [{s1, ok}, {s2, ok}]} =
        hm_mrdt_node:publish_many(N0, map_store(#{}), [{s1, Pending(s1, {1, a})},
                                                       {s2, Pending(s2, {2, b})}]),
    Check(apply_writes(#{}, St3), N3),
    %% a third session of the group merges with the first two's merge, which no commit
    %% holds: it is stored too
    {N4, St4, [{s1, ok}, {s2, ok}, {s3, ok}]} =
        hm_mrdt_node:publish_many(hm_mrdt_node:open(N0, s3, none), map_store(#{}),
                                  [{s1, Pending(s1, {1, a})}, {s2, Pending(s2, {2, b})},
                                   {s3, Pending(s3, {0, z})}]),
    M4 = apply_writes(#{}, St4),
    St = map_store(M4),
    ?assertEqual(true, hm_mrdt_commits:complete(St, hm_mrdt_node:head(N4))),
    ?assertEqual([{2, b}, {1, a}, {0, z}],
                 L:read(value(M4, hm_mrdt_node:head(N4), log),
                        fun(H) -> hm_mrdt_history:get(St, {obj, H}) end)).

%% Collection deletes the objects (linked values) only collected commits reach: a log key
%% replaced by a new log leaves the old log's values to collection, while a log that kept
%% growing keeps every value (the newest refers to all of them), and an object no commit
%% reaches yet (stored for a publish under way) stays.
gc_objects_test() ->
    L = hm_mrdt_linked_log,
    Append = fun(Map, C, K, E, N) ->
                     Old = value(Map, C, K),
                     commit(Map, C, #{K => {L, L:update(Old, E)}}, N)
             end,
    {M1, C1} = lists:foldl(fun(I, {M, C}) -> Append(M, C, grow, {g, I}, {g, I}) end,
                           {#{}, none}, lists:seq(1, 10)),
    {M2, C2} = lists:foldl(fun(I, {M, C}) -> Append(M, C, old, {o, I}, {o, I}) end,
                           {M1, C1}, lists:seq(1, 10)),
    %% the key `old' now holds a new log that does not refer to the old one
    {M3, C3} = commit(M2, C2, #{old => {L, L:update(none, fresh)}}, fresh),
    {M4, C4} = Append(M3, C3, grow, {g, 11}, more),
    Orphan = {entry, not_yet_published, nil},
    M5 = M4#{{obj, hm_mrdt:hash(Orphan)} => Orphan},
    Objs = fun(M) -> lists:sort([K || {obj, _} = K <- maps:keys(M)]) end,
    ?assertEqual(10 + 11 + 1 + 1, length(Objs(M5))),
    Plan = hm_mrdt_collect:gc_plan(map_store(M5), [C4], []),
    ?assertMatch(#{floor := C4}, Plan),
    M6 = apply_plan(M5, Plan),
    %% the ten values of the replaced log are gone; the growing log, the new log and the
    %% orphan stay
    ?assertEqual(Objs(M5) -- Objs(M6), lists:sort([K || {obj, _} = K <- maps:get(delete, Plan)])),
    ?assertEqual(10, length(Objs(M5) -- Objs(M6))),
    St = map_store(M6),
    Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
    ?assertEqual([{g, I} || I <- lists:seq(11, 1, -1)], L:read(value(M6, C4, grow), Fetch)),
    ?assertEqual([fresh], L:read(value(M6, C4, old), Fetch)),
    ?assert(is_map_key({obj, hm_mrdt:hash(Orphan)}, M6)),
    ?assert(hm_mrdt_commits:complete(St, C4)).

%% Two roots that share no history: nothing to collect.
gc_disjoint_test() ->
    {M1, A} = incr(#{}, none, 1),
    {M2, B} = incr(M1, none, 2),
    ?assertMatch(#{floor := none, delete := []},
                 hm_mrdt_collect:gc_plan(map_store(M2), [A, B], [])).

complete_test() ->
    {M1, A} = incr(#{}, none, 1),
    {M2, B} = incr(M1, A, 2),
    ?assert(hm_mrdt_commits:complete(map_store(M2), B)),
    ?assertEqual({missing, {block, A}}, hm_mrdt_commits:complete(map_store(maps:remove({block, A}, M2)), B)),
    %% a commit sharing a leaf of B's pack (x) needs B's record even when its parents were
    %% collected (a graft at least as high)
    Y = hd([K || K <- lists:seq(1, 100), erlang:phash2(K, 64) =/= erlang:phash2(x, 64)]),
    {M3, C} = commit(M2, B, #{Y => {hm_mrdt_counter, 1}}, c),
    Collected = fun(M) -> hm_mrdt_history:set_max_graft(map_store(M), 10) end,
    ?assert(hm_mrdt_commits:complete(Collected(maps:remove({block, A}, M3)), C)),
    ?assertEqual({missing, {block, B}}, hm_mrdt_commits:complete(Collected(maps:remove({block, B}, M3)), C)),
    ?assertEqual(lists:sort([B, C]), lists:sort(hm_mrdt_commits:packs(map_store(M3), C))).

types_errors_test() ->
    ?assertMatch({conflict, {merge_failed, hm_mrdt_counter, _}},
                 hm_mrdt:merge(hm_mrdt_counter, 1, a, 2)),
    ?assertEqual({ok, 3}, hm_mrdt_counter:merge(none, 1, 2)),
    ?assertEqual({ok, [2, 3]}, hm_mrdt_set:merge([1, 2], [2], [1, 2, 3])),
    ?assertEqual({ok, [c, d, e]}, hm_mrdt_queue:merge([a, b, c], [b, c, d], [c, e])),
    ?assertEqual({ok, [{3, x}, {2, y}, {1, z}]},
                 hm_mrdt_blob_log:merge([{1, z}], [{2, y}, {1, z}], [{3, x}, {1, z}])),
    ?assertEqual({conflict, not_an_extension}, hm_mrdt_blob_log:merge([a], [b], [a])),
    ?assertEqual({ok, #{k => {hm_mrdt_counter, 5}}},
                 hm_mrdt_map:merge(#{k => {hm_mrdt_counter, 1}}, #{k => {hm_mrdt_counter, 3}},
                                   #{k => {hm_mrdt_counter, 3}, j => {hm_mrdt_set, []}} )
                 =:= {ok, #{k => {hm_mrdt_counter, 5}}} orelse
                 hm_mrdt_map:merge(#{k => {hm_mrdt_counter, 1}}, #{k => {hm_mrdt_counter, 3}},
                                   #{k => {hm_mrdt_counter, 3}})),
    ?assert(hm_mrdt:is_type(hm_mrdt_set)),
    ?assertNot(hm_mrdt:is_type(io)),
    ?assertNot(hm_mrdt:is_type("x")).

%% The run-time store (hm_mrdt_store): a leaf is read out of its commit's record once, then
%% from the node's unpacked blocks; the commit's header without its pack; presence without
%% a read; unpacked blocks of a collected commit, or of a deleted repository, are dropped.
unpacked_store_test() ->
    {M1, A} = incr(#{}, none, 1),
    Tab = hm_mrdt_unpack_test,
    _ = ets:new(Tab, [set, public, named_table, {keypos, 2}]),
    Unpacked = hm_mrdt_store:unpacked(),
    Owned = ets:info(Unpacked) =:= undefined andalso
        ets:new(Unpacked, [set, public, named_table]) =:= Unpacked,
    try
        true = ets:insert(Tab, [{Tab, K, V} || {K, V} <- maps:to_list(M1)]),
        Fetch = hm_mrdt_store:fetch(Tab),
        {commit, Ps, T, H, Pack} = hm_mrdt_history:open_commit(maps:get({block, A}, M1)),
        [{L, Leaf}] = maps:to_list(Pack),
        ?assertEqual({ok, Leaf}, Fetch({block, A, L})),
        ?assertEqual({ok, {commit, Ps, T, H}}, Fetch({head, A})),
        ?assertEqual({ok, true}, Fetch({member, {block, A}})),
        ?assertEqual([{{Tab, A, L}, Leaf}], ets:lookup(Unpacked, {Tab, A, L})),
        ?assertEqual(1, value(M1, A, x)),
        St = hm_mrdt_store:reader(Tab),
        ?assertEqual({ok, hm_mrdt_counter, 1},
                     hm_mrdt_commits:read(St, hm_mrdt_commits:tree_of(St, A), x)),
        %% collected: its unpacked blocks go at the next purge
        true = ets:delete(Tab, {block, A}),
        ok = hm_mrdt_store:purge_unpacked(Tab),
        ?assertEqual([], ets:match(Unpacked, {{Tab, '_', '_'}, '_'})),
        ?assertEqual(not_found, Fetch({block, A, L})),
        true = ets:insert(Tab, {Tab, {block, A}, maps:get({block, A}, M1)}),
        {ok, _} = Fetch({head, A}),
        true = ets:delete(Tab),
        ok = hm_mrdt_store:purge_unpacked(Tab),
        ?assertEqual([], ets:match(Unpacked, {{Tab, '_', '_'}, '_'}))
    after
        _ = ets:info(Tab, id) =/= undefined andalso ets:delete(Tab),
        _ = Owned andalso ets:delete(Unpacked)
    end.
