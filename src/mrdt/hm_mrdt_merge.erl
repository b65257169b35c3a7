%% @doc Merges of a repository's history, as pure functions over a
%% {@link hm_mrdt_history:store()}: the three-way merge of two trees over their LCA's, key by
%% key with each key's mergeable type ({@link hm_mrdt:merge/4}); the merge of two commits,
%% with a recursive merge of their LCAs when there are several (criss-cross histories) and a
%% cache of merged LCAs; and the carrying of a session's writes onto a branch that moved.
%% After "Banyan: Coordination-free Distributed Transactions over Mergeable Types", sections
%% 2.1 (mergeable types and their three-way merge), 3 (publish and refresh carry a session's
%% writes) and 4.3 (recursive merges and their cache).
%%
%% == Invariants ==
%% <ul>
%% <li>{@link merge_commits/3} is commutative in its two commits: a merge commit's nonce is
%% derived from the merged commits, so two nodes that merge the same two commits create the
%% same commit.</li>
%% <li>Each pair of LCAs is merged once: the result is cached under `{cache, [L1, L2]}'.</li>
%% <li>A bucket both sides changed gets a new leaf, so that a leaf names one history (see
%% {@link merge_trees/4}).</li>
%% <li>A type that refuses a merge makes the whole merge a `{conflict, Reason}', with no
%% effect on the store the caller holds.</li>
%% </ul>
-module(hm_mrdt_merge).

-export([merge_commits/3, merge_writes/4, merge_writes/5, merge_trees/4]).

-type store() :: hm_mrdt_history:store().
-type hash() :: hm_mrdt_history:hash().
-type commit() :: hm_mrdt_history:commit().
-type tree() :: hm_mrdt_commits:tree().

%%% ------------------------------------------------------------------ merges

%% @doc Merge two commits: the same commit; a fast-forward when one is an ancestor of the
%% other; else a merge commit (parents both, tree the three-way merge of their trees over the
%% merged LCAs). Several LCAs (criss-cross) are merged first, recursively, each pair once:
%% the result is cached under `{cache, [L1, L2]}'.
-spec merge_commits(store(), commit(), commit()) ->
          {ok, commit(), store()} | {conflict, term()}.
merge_commits(St, A, B) ->
    try merge_c(St, A, B)
    catch throw:{conflict, _} = C -> C;
          throw:{missing, K} -> {conflict, {missing, K}}
    end.

merge_c(St, none, B) -> {ok, B, St};
merge_c(St, A, none) -> {ok, A, St};
merge_c(St, A, A) -> {ok, A, St};
merge_c(St, A, B) ->
    case hm_mrdt_ancestry:lcas(St, A, B) of
        [A] -> {ok, B, St};
        [B] -> {ok, A, St};
        Ls ->
            {L, St1} = merged_lca(St, Ls),
            three_way(St1, L, A, B)
    end.

%% The LCAs merged into one commit (none for none), pairwise, through the cache.
merged_lca(St, []) -> {none, St};
merged_lca(St, [L]) -> {L, St};
merged_lca(St, [L1, L2 | Ls]) ->
    Key = {cache, lists:sort([L1, L2])},
    {M, St2} = case hm_mrdt_history:get(St, Key) of
                   {ok, Cached} -> {Cached, St};
                   not_found ->
                       {ok, M1, St1} = merge_c(St, L1, L2),
                       {M1, hm_mrdt_history:put(St1, Key, M1)}
               end,
    merged_lca(St2, [M | Ls]).

three_way(St0, L, A, B) ->
    Nonce0 = hm_mrdt_history:nonce(St0),
    St1 = hm_mrdt_history:set_nonce(St0, {merge, lists:sort([A, B])}),
    case merge_trees(St1, hm_mrdt_commits:tree_of(St1, L), hm_mrdt_commits:tree_of(St1, A),
                     hm_mrdt_commits:tree_of(St1, B)) of
        {ok, T, St2} ->
            {C, St3} = hm_mrdt_commits:commit(St2, [A, B], T),
            {ok, C, hm_mrdt_history:set_nonce(St3, Nonce0)};
        {conflict, _} = Conflict -> throw(Conflict)
    end.

%% @doc Carry writes made over tree `Old' onto tree `New' (a descendant): each key written
%% (`#{Key => {Type, Value}}') merges with its type, the LCA being the key's value in `Old'
%% and the other side its value in `New'; a key unchanged between the two keeps the written
%% value. This is a publish onto a public branch that moved since the session's base, and a
%% refresh that moves a session with unpublished writes. `{conflict, {Key, Reason}}' when a
%% type refuses.
-spec merge_writes(store(), hash() | empty, hash() | empty, #{term() => {module(), term()}}) ->
          {ok, #{term() => {module(), term()}}} | {conflict, term()}.
merge_writes(_, T, T, Writes) -> {ok, Writes};
merge_writes(St, Old, New, Writes) -> merge_writes(St, Old, New, #{}, Writes).

%% @doc {@link merge_writes/4} onto tree `New' overlaid with `Over' (writes not yet stored
%% in a tree: a group of publishes merged one after the other into one commit).
-spec merge_writes(store(), hash() | empty, hash() | empty, #{term() => {module(), term()}},
                   #{term() => {module(), term()}}) ->
          {ok, #{term() => {module(), term()}}} | {conflict, term()}.
merge_writes(_, T, T, Over, Writes) when map_size(Over) =:= 0 -> {ok, Writes};
merge_writes(St, Old, New, Over, Writes) ->
    %% a key whose entry (type and blob) is the same in both trees is unchanged, without
    %% reading its value
    try {ok, maps:map(fun(K, {T, V}) -> merge_write(St, K, T, V, Old, New, Over) end, Writes)}
    catch throw:{conflict, _} = C -> C
    end.

merge_write(St, K, T, V, Old, New, Over) ->
    EOld = hm_mrdt_commits:lookup(St, Old, K),
    Now = case Over of
              #{K := {TO, VO}} -> {value, TO, VO};
              _ -> hm_mrdt_commits:lookup(St, New, K)
          end,
    case Now of
        {ok, {T2, _}} when T2 =/= T -> throw({conflict, {K, {type_mismatch, T2, T}}});
        {value, T2, _} when T2 =/= T -> throw({conflict, {K, {type_mismatch, T2, T}}});
        EOld -> {T, V};
        not_found -> {T, V};
        _ ->
            L = case EOld of
                    {ok, {T, HL}} -> hm_mrdt_commits:blob(St, HL);
                    _ -> none
                end,
            A = case Now of
                    {ok, {_, HA}} -> hm_mrdt_commits:blob(St, HA);
                    {value, _, VA} -> VA
                end,
            case A of
                L -> {T, V};
                _ ->
                    case hm_mrdt:merge(T, L, A, V) of
                        {ok, M} -> {T, M};
                        {conflict, R} -> throw({conflict, {K, R}})
                    end
            end
    end.

%% @doc Three-way merge of trees, bucket by bucket and key by key; a key both sides changed
%% merges with its type (see {@link hm_mrdt_map} for the rules on keys present on one side).
%% A bucket only one side changed is taken from that side as it is (its leaf is shared, not
%% rewritten); a bucket both sides changed gets a new leaf, named by the merge's nonce, even
%% when its entries equal one side's: a leaf then names one history, not only one value, so
%% two sides showing the same leaf made the same changes and merge to it. (Reusing a side's
%% leaf for an equal result would let two merges with different histories show one leaf: a
%% counter at 0 reached two ways, which merged as one version loses a change.)
-spec merge_trees(store(), tree(), tree(), tree()) -> {ok, tree(), store()} | {conflict, term()}.
merge_trees(St, _, T, T) -> {ok, T, St};
merge_trees(St, L, L, B) -> {ok, B, St};
merge_trees(St, L, A, L) -> {ok, A, St};
merge_trees(St0, L, A, B) ->
    try
        {BL, BA, BB} = {hm_mrdt_commits:buckets(L), hm_mrdt_commits:buckets(A),
                        hm_mrdt_commits:buckets(B)},
        {Bs, St1} = lists:foldl(
                      fun(Bk, {Acc, S}) ->
                              {LL, LA, LB} = {maps:get(Bk, BL, none), maps:get(Bk, BA, none),
                                              maps:get(Bk, BB, none)},
                              {Leaf, S1} = merge_bucket(S, LL, LA, LB),
                              {set_bucket(Acc, Bk, Leaf), S1}
                      end, {BA, St0}, lists:usort(maps:keys(BA) ++ maps:keys(BB))),
        if Bs =:= BA, Bs =:= BB -> {ok, min(A, B), St1};
           Bs =:= BA -> {ok, A, St1};
           Bs =:= BB -> {ok, B, St1};
           true -> {ok, hm_mrdt_commits:new_tree(Bs), St1}
        end
    catch throw:{conflict, _} = C -> C
    end.

set_bucket(Bs, Bk, none) -> maps:remove(Bk, Bs);
set_bucket(Bs, Bk, Leaf) -> Bs#{Bk => Leaf}.

%% One bucket's leaf after the merge (`none': no leaf).
merge_bucket(St, _, X, X) -> {X, St};
merge_bucket(St, X, X, Y) -> {Y, St};
merge_bucket(St, X, Y, X) -> {Y, St};
merge_bucket(St0, LL, LA, LB) ->
    {EA, EB} = {hm_mrdt_commits:leaf(St0, LA), hm_mrdt_commits:leaf(St0, LB)},
    {Es, St} = merge_leaves(St0, hm_mrdt_commits:leaf(St0, LL), EA, EB, #{}),
    Merged = maps:filter(fun(_, E) -> E =/= none end, Es),
    %% both sides changed the bucket: a new leaf even when the merged entries equal one
    %% side's, so that a leaf names one history (see merge_trees/4)
    case map_size(Merged) of
        0 -> {none, St};
        _ -> hm_mrdt_commits:put_leaf(St, Merged)
    end.

merge_leaves(St0, LL, LA, LB, Acc0) ->
    Keys = lists:usort(maps:keys(LA) ++ maps:keys(LB)),
    lists:foldl(
      fun(K, {Acc, St}) ->
              {E, St1} = merge_entry(St, K, maps:find(K, LL), maps:find(K, LA), maps:find(K, LB)),
              {Acc#{K => E}, St1}
      end, {Acc0, St0}, Keys).

merge_entry(St, _, X, X, Y) -> {found(Y), St};
merge_entry(St, _, X, Y, X) -> {found(Y), St};
%% the same blob is the same version; two equal values kept in leaves may be two changes
%% (two increments of a counter by the same amount), which only the type can merge
merge_entry(St, _, _, {ok, {_, {H, _}}} = Y, Y) when H =/= v -> {found(Y), St};
merge_entry(St, _, _, {ok, E}, error) -> {E, St};
merge_entry(St, _, _, error, {ok, E}) -> {E, St};
merge_entry(St, K, L, {ok, {T, HA}}, {ok, {T, HB}}) ->
    LV = case L of
             {ok, {T, HL}} -> hm_mrdt_commits:blob(St, HL);
             _ -> none
         end,
    case hm_mrdt:merge(T, LV, hm_mrdt_commits:blob(St, HA),
                       hm_mrdt_commits:blob(St, HB)) of
        {ok, V} ->
            {H, St1} = hm_mrdt_commits:put_blob(St, T, V),
            {{T, H}, St1};
        {conflict, R} -> throw({conflict, {K, R}})
    end;
merge_entry(_, K, _, {ok, {TA, _}}, {ok, {TB, _}}) ->
    throw({conflict, {K, {type_mismatch, TA, TB}}}).

found({ok, E}) -> E;
found(error) -> none.
