%% @doc Commits and their trees, as pure functions over a {@link hm_mrdt_history:store()}:
%% storing a commit, reading a commit's parents, tree and height, reading and writing keys in
%% a tree, and checking that a commit was fully received. After "Banyan: Coordination-free
%% Distributed Transactions over Mergeable Types", section 4.1 (the Git object model: a
%% commit names its parents and a tree of the repository's keys) and section 4.2 (a node
%% skips a branch whose history it has not fully received).
%%
%% A tree is `empty' or a map of 64 buckets (keys are spread by hash) to leaves; a leaf maps
%% keys to `{Type, Value}' entries, the value kept in the leaf when it is small (at most 256
%% bytes in external format) and in a blob otherwise. Leaves and blobs live in the pack of the
%% commit that created them; see {@link hm_mrdt_history} for how they are stored.
%%
%% == Invariants ==
%% <ul>
%% <li>A commit's height is one more than its highest parent's (0 without parents): an
%% ancestor is always lower than its descendants.</li>
%% <li>A commit's record holds its tree and, in its pack, every leaf and blob the step that
%% made it created: one record per commit. A commit that changes a few keys creates a few
%% leaves and shares the other buckets' leaves with its parent.</li>
%% <li>Reading, every reference is absolute (`{Home, Hash}'); storing, a reference into the
%% commit's own pack is the hash alone.</li>
%% </ul>
-module(hm_mrdt_commits).

-export([commit/3, commit_info/2, tree_of/2, packs/2, lookup/3, read/3, write_tree/3,
         repack/2, put_objects/2, entries/2, complete/2]).
%% For hm_mrdt_merge and hm_mrdt_collect: a tree's buckets and leaves, and new blocks.
-export([buckets/1, leaf/2, leaf_or_none/2, blob/2, put_blob/3, put_leaf/2, new_tree/1,
         reach_blocks/2]).
-export_type([tree/0, entry/0]).

-define(BUCKETS, 64).
%% Values up to this many bytes (external format) are kept in their leaf, not in a blob.
-define(INLINE, 256).

-type store() :: hm_mrdt_history:store().
-type hash() :: hm_mrdt_history:hash().
-type commit() :: hm_mrdt_history:commit().
-type key() :: hm_mrdt_history:key().
-type ref() :: hm_mrdt_history:ref().
-type entry() :: {module(), ref() | {v, term()}}.
%% A tree: `empty', or the commit (`pending': this step's commit-to-be) whose record holds
%% its bucket map, and that map (bucket to leaf; a hash alone names a leaf of that commit's
%% pack, `{Home, Hash}' one of commit `Home''s pack).
-type tree() :: empty | {hash() | pending, #{non_neg_integer() => hash() | ref()}}.

%%% ------------------------------------------------------------------ commits and trees

%% References: inside a stored tree or leaf, a hash alone names a block of the same pack, and
%% `{Home, Hash}' one of commit `Home''s pack. Read, every reference is made absolute.
abs(Ctx, H) when is_binary(H) -> {Ctx, H};
abs(_, {_, _} = R) -> R.
%% Stored, a reference `{pending, Hash}' to this step's pack is the hash alone (rel_refs/1).

%% @doc Store a commit of `Tree' (`empty' or a tree from {@link tree_of/2},
%% {@link write_tree/3} or {@link hm_mrdt_merge:merge_trees/4}) with `Parents'. The commit's
%% record holds its tree and, in its pack, every leaf and blob this step created: one record
%% per commit.
-spec commit(store(), [hash()], tree()) -> {hash(), store()}.
commit(St, Parents, Tree) ->
    Height = lists:max([-1 | [height(St, P) || P <- Parents]]) + 1,
    Stored = case Tree of
                 empty -> empty;
                 {pending, M} -> M;
                 {Ctx, M} -> abs_refs(Ctx, M)
             end,
    {Pack, St1} = hm_mrdt_history:take_pack(St),
    Block = {commit, lists:sort(Parents), Stored, Height, Pack},
    %% the pack's keys are the hashes of its blocks: hashing them rather than the blocks
    %% covers the same content without hashing every block's bytes a second time
    C = hm_mrdt:hash({commit, lists:sort(Parents), Stored, Height, lists:sort(maps:keys(Pack))}),
    {C, hm_mrdt_history:put(St1, {block, C}, Block)}.

height(St, C) ->
    case hm_mrdt_history:header(St, C) of
        {ok, {commit, _, _, H}} -> H;
        _ -> 0
    end.

%% @doc The parents, tree and height of a commit, or `not_found'.
-spec commit_info(store(), hash()) -> {ok, {[hash()], tree(), non_neg_integer()}} |
          not_found.
commit_info(St, C) ->
    case hm_mrdt_history:header(St, C) of
        {ok, {commit, Ps, T, H}} -> {ok, {Ps, tree(C, T), H}};
        not_found -> not_found
    end.

tree(_, empty) -> empty;
tree(C, M) -> {C, M}.

%% @doc The tree of a commit (`empty' for `none').
-spec tree_of(store(), commit()) -> tree().
tree_of(_, none) -> empty;
tree_of(St, C) ->
    case hm_mrdt_history:header(St, C) of
        {ok, {commit, _, T, _}} -> tree(C, T);
        not_found -> throw({missing, {block, C}})
    end.

%% @doc The commits whose packs hold the leaves and blobs a commit's tree reaches (itself
%% included when it created some).
-spec packs(store(), hash()) -> [hash()].
packs(St, C) ->
    lists:usort([Home || {Home, _} <- maps:keys(reach_blocks(St, [C]))]).

bucket(Key) -> erlang:phash2(Key, ?BUCKETS).

%% @doc The bucket map of a tree, with absolute references.
-spec buckets(tree()) -> #{non_neg_integer() => ref()}.
buckets(empty) -> #{};
buckets({Ctx, M}) -> abs_refs(Ctx, M).

%% Making references absolute or relative changes few of a map's values (in a tree, the
%% leaves of its own pack; in a leaf, its blobs; values kept in the leaf never): those are
%% found in the map's list and only they are replaced, where rebuilding the whole map
%% (maps:map/2) would copy every value of every tree and leaf a step reads or writes.
abs_refs(Ctx, M) -> replace(M, [{K, {Ctx, H}} || {K, H} <- maps:to_list(M), is_binary(H)]).

rel_refs(M) -> replace(M, [{K, H} || {K, {pending, H}} <- maps:to_list(M)]).

replace(M, []) -> M;
replace(M, Changed) -> maps:merge(M, maps:from_list(Changed)).

bucket_leaf(empty, _) -> error;
bucket_leaf({Ctx, M}, Bk) ->
    case M of
        #{Bk := R} -> {ok, abs(Ctx, R)};
        _ -> error
    end.

%% @doc A leaf's entries, blob references absolute (`#{}' for `none').
-spec leaf(store(), ref() | none) -> #{term() => entry()}.
leaf(_, none) -> #{};
leaf(St, {Home, L}) ->
    {leaf, Es, _} = hm_mrdt_history:block_at(St, Home, L),
    replace(Es, [{K, {T, {Home, H}}} || {K, {T, H}} <- maps:to_list(Es), is_binary(H)]).

%% @doc The entry `{Type, BlobRef | {v, Value}}' of `Key' in a tree.
-spec lookup(store(), tree(), term()) -> {ok, entry()} | not_found.
lookup(St, T, Key) ->
    case bucket_leaf(T, bucket(Key)) of
        {ok, {Home, L}} ->
            {leaf, Es, _} = hm_mrdt_history:block_at(St, Home, L),
            case Es of
                #{Key := {_, {v, _}} = E} -> {ok, E};
                #{Key := {Type, R}} -> {ok, {Type, abs(Home, R)}};
                _ -> not_found
            end;
        error -> not_found
    end.

%% @doc The value of `Key' in a tree: `{ok, Type, Value}' or `not_found'.
-spec read(store(), tree(), term()) -> {ok, module(), term()} | not_found.
read(St, T, Key) ->
    case lookup(St, T, Key) of
        {ok, {Type, B}} -> {ok, Type, blob(St, B)};
        _ -> not_found
    end.

%% @doc The value an entry holds: kept in its leaf, or in the blob it refers to.
-spec blob(store(), ref() | {v, term()}) -> term().
blob(_, {v, V}) -> V;
blob(St, {Home, B}) ->
    {blob, _, V, _} = hm_mrdt_history:block_at(St, Home, B),
    V.

%% @doc Every `{Key, {Type, BlobRef | {v, Value}}}' of a tree.
-spec entries(store(), tree()) -> [{term(), entry()}].
entries(St, T) ->
    lists:append([maps:to_list(leaf(St, L)) || L <- maps:values(buckets(T))]).

%% @doc A tree: `Base' (`empty' or a tree) with `Writes' (`#{Key => {Type, Value}}')
%% stored as new blobs.
-spec write_tree(store(), tree(), #{term() => {module(), term()}}) -> {tree(), store()}.
write_tree(St, Base, Writes) when map_size(Writes) =:= 0 -> {Base, St};
write_tree(St0, Base, Writes) ->
    {Entries, St1} = maps:fold(fun(K, {Type, V}, {Acc, S}) ->
                                       {B, S1} = put_blob(S, Type, V),
                                       {Acc#{K => {Type, B}}, S1}
                               end, {#{}, St0}, Writes),
    set_entries(St1, Base, Entries).

%% @doc Tree `T' with every leaf and blob copied into this step's pack: the same entries
%% (values, types and objects untouched), so that a commit of it shares no block with older
%% commits and their packs can be collected. A bucket's new leaf is a change of the bucket
%% (a merge with a branch that changed it merges key by key, and equal entries are no
%% change).
-spec repack(store(), tree()) -> {tree(), store()}.
repack(St, empty) -> {empty, St};
repack(St0, T) ->
    {Bs, St} = maps:fold(
                 fun(Bk, L, {Acc, S}) ->
                         {Es, S1} = maps:fold(
                                      fun(K, {_, {v, _}} = E, {EAcc, SA}) -> {EAcc#{K => E}, SA};
                                         (K, {Ty, B}, {EAcc, SA}) ->
                                              {blob, _, V, _} = hm_mrdt_history:block_at(
                                                                  SA, element(1, B), element(2, B)),
                                              Mark = hm_mrdt_history:block_mark(SA),
                                              {R, SA1} = hm_mrdt_history:put_block(
                                                           SA, {blob, Ty, V, Mark}),
                                              {EAcc#{K => {Ty, R}}, SA1}
                                      end, {#{}, S}, leaf(S, L)),
                         {R, S2} = put_leaf(S1, Es),
                         {Acc#{Bk => R}, S2}
                 end, {#{}, St0}, buckets(T)),
    {new_tree(Bs), St}.

%% @doc Store as objects (`{obj, Hash}') the values of linked types among `Writes'
%% (`#{Key => {Type, Value}}'). A publish stores a session's pending values before merging
%% them: a merged linked value refers to the pending one by hash, and the commit holds only
%% the merged value.
-spec put_objects(store(), #{term() => {module(), term()}}) -> store().
put_objects(St, Writes) ->
    maps:fold(fun(_, {Type, V}, S) -> put_object(S, Type, V) end, St, Writes).

put_object(St, Type, V) ->
    case hm_mrdt:is_linked(Type) of
        true -> hm_mrdt_history:put(St, {obj, hm_mrdt:hash(V)}, V);
        false -> St
    end.

%% @doc Store a value of `Type' for a new entry: kept in the leaf (`{v, V}') when small,
%% else a new blob of this step. A value of a linked type is also stored as an object.
-spec put_blob(store(), module(), term()) -> {ref() | {v, term()}, store()}.
put_blob(St, Type, V) ->
    St1 = put_object(St, Type, V),
    case erlang:external_size(V) =< ?INLINE of
        true -> {{v, V}, St1};
        false ->
            hm_mrdt_history:put_block(St1, {blob, Type, V, hm_mrdt_history:block_mark(St)})
    end.

%% @doc A new leaf of this step (`Es' with absolute references).
-spec put_leaf(store(), #{term() => entry()}) -> {ref(), store()}.
put_leaf(St, Es) ->
    Rel = replace(Es, [{K, {T, H}} || {K, {T, {pending, H}}} <- maps:to_list(Es)]),
    hm_mrdt_history:put_block(St, {leaf, Rel, hm_mrdt_history:block_mark(St)}).

%% @doc A tree of this step from a bucket map with absolute references.
-spec new_tree(#{non_neg_integer() => ref()}) -> tree().
new_tree(Bs) when map_size(Bs) =:= 0 -> empty;
new_tree(Bs) -> {pending, rel_refs(Bs)}.

%% Base with these entries set (`none' entries removed).
set_entries(St0, Base, Entries) ->
    ByBucket = maps:groups_from_list(fun({K, _}) -> bucket(K) end, maps:to_list(Entries)),
    Bs0 = buckets(Base),
    {Bs, St} = maps:fold(
                 fun(Bk, Es, {Bs, S}) ->
                         L0 = leaf(S, maps:get(Bk, Bs, none)),
                         L = lists:foldl(fun({K, none}, M) -> maps:remove(K, M);
                                            ({K, E}, M) -> M#{K => E}
                                         end, L0, Es),
                         case map_size(L) of
                             0 -> {maps:remove(Bk, Bs), S};
                             _ -> {R, S1} = put_leaf(S, L),
                                  {Bs#{Bk => R}, S1}
                         end
                 end, {Bs0, St0}, ByBucket),
    {new_tree(Bs), St}.

%% @doc The leaves and blobs the commits' trees reach: `#{{Home, Hash} => leaf | blob}'. A
%% pack already deleted (by another node's collection) is skipped.
-spec reach_blocks(store(), [hash()]) -> #{ref() => leaf | blob}.
reach_blocks(St, Commits) ->
    lists:foldl(fun(C, Acc) ->
                        case commit_info(St, C) of
                            {ok, {_, T, _}} -> reach_tree(St, T, Acc);
                            not_found -> Acc
                        end
                end, #{}, Commits).

reach_tree(St, T, Acc) ->
    lists:foldl(fun(L, A) -> reach_leaf(St, L, A) end, Acc, maps:values(buckets(T))).

reach_leaf(_, L, Acc) when is_map_key(L, Acc) -> Acc;
reach_leaf(St, L, Acc) ->
    maps:fold(fun(_, {_, {v, _}}, A) -> A;
                 (_, {_, B}, A) -> A#{B => blob}
              end, Acc#{L => leaf}, leaf_or_none(St, L)).

%% @doc {@link leaf/2}, or `#{}' when the leaf's pack is no longer in the store.
-spec leaf_or_none(store(), ref()) -> #{term() => entry()}.
leaf_or_none(St, R) ->
    try leaf(St, R)
    catch throw:{missing, _} -> #{}
    end.

%%% ------------------------------------------------------------------ reception

%% @doc Whether a commit was fully received: the commit, its tree, leaves and blobs, the
%% values they refer to, and its parents (unless a graft at least as high shows they were
%% collected) are in the store. Older history arrived before it: blocks are written before
%% the commits that name them, and EC tables deliver each node's writes in causal order.
-spec complete(store(), hash()) -> true | {missing, key()}.
complete(St, C) ->
    try
        {Ps, T, H} = case commit_info(St, C) of
                         {ok, I} -> I;
                         not_found -> throw({missing, {block, C}})
                     end,
        Collected = hm_mrdt_history:max_graft(St) >= H - 1
            orelse hm_mrdt_history:get(St, {graft, C}) =/= not_found,
        _ = [has_or_throw(St, {block, P}) || P <- Ps, not Collected],
        %% a leaf or blob is there when the commit whose pack holds it is
        Leaves = maps:values(buckets(T)),
        Entries = [E || L <- Leaves, _ <- [has_or_throw(St, {block, element(1, L)})],
                        {_, E} <- maps:to_list(leaf(St, L))],
        lists:foreach(fun({_, {v, _}}) -> ok;
                          ({_, {Home, _}}) -> has_or_throw(St, {block, Home})
                      end, Entries),
        lists:foreach(fun({Type, B}) ->
                              case hm_mrdt:is_linked(Type) of
                                  true -> [present(St, {obj, R})
                                           || R <- hm_mrdt:refs(Type, blob(St, B))];
                                  false -> ok
                              end
                      end, Entries),
        true
    catch throw:{missing, K} -> {missing, K}
    end.

has_or_throw(St, K) ->
    case hm_mrdt_history:has(St, K) of
        true -> ok;
        false -> throw({missing, K})
    end.

present(St, K) ->
    case hm_mrdt_history:get(St, K) of
        {ok, _} -> ok;
        not_found -> throw({missing, K})
    end.
