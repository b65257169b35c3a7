%% @doc Content-addressed history of a repository, as pure functions: blobs, leaves, trees and
%% commits; the lowest common ancestors (LCAs) of two commits; three-way merges of trees and
%% the recursive merge of criss-cross histories with a cache of merged LCAs; the check that a
%% commit has been fully received; and the history collection plan. After "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", sections 4.1 (the Git
%% object model), 4.2 (skipping branches not fully received), 4.3 (recursive merges and their
%% cache) and 4.4 (garbage collection, which Banyan sketches and this module implements).
%%
%% == Store ==
%% Every function reads the store through a {@link store()}: a read-only `Fetch' function
%% over the keys below (the local copy of an EC table at run time, a map in the simulator)
%% and an overlay of what this step added. {@link writes/1} gives the step's effects, to be
%% written in order. Keys and values:
%% <ul>
%% <li>`{block, Hash}': a commit, `{commit, Parents, Tree, Height, Pack}' (stored with `Tree'
%% and `Pack' in external format, see {@link open_commit/1}), one record holding
%% everything the commit created: `Tree' (`empty' or `#{Bucket => LeafRef}') and `Pack'
%% (`#{Hash => Block}': the leaves `{leaf, #{Key => {Type, BlobRef | {v, Value}}}, Nonce}'
%% and blobs `{blob, Type, Value, Nonce}' made by the step that made the commit). Inside a
%% commit's tree or leaves a reference is a hash alone for a block of the same pack, or
%% `{Home, Hash}' for one of commit `Home''s pack (a leaf or blob shared with an older
%% commit). The commit's hash covers all of it (its pack through the hashes of the pack's
%% blocks, which are its keys). A value of at most 256 bytes (external
%% format) is kept in its leaf (`{v, Value}'), a larger one in a blob. Keys are spread over
%% 64 buckets, so a commit that changes a few keys creates a few small leaves and shares the
%% others with its parent. A publish or a merge is thus one record, whatever it changed.</li>
%% <li>`{obj, Hash}': a value of a type with references (`hm_mrdt:refs/2'), addressed by
%% {@link hm_mrdt:hash/1}.</li>
%% <li>`{graft, Hash}': the commit (of the given height) is the oldest kept: its ancestors
%% were collected. A commit no higher than a graft is already part of every branch.</li>
%% <li>`{cache, [Hash1, Hash2]}': the commit merging two LCAs (section 4.3).</li>
%% </ul>
%% A `Fetch' may also answer keys that spare copying a whole pack (see {@link fetch_key()}).
%%
%% == Invariants ==
%% <ul>
%% <li>Blocks are immutable and named by the hash of their content. Every leaf and blob a
%% step creates carries the step's nonce (its hash when the nonce is larger than 40 bytes),
%% so a new commit never has the name of an old one that history collection may be deleting
%% at the same time; merges use a nonce derived from the merged commits, so two nodes that
%% merge the same two commits create the same commit.
%% Blocks of a step wait aside (`pending') until {@link commit/3} packs them.</li>
%% <li>A commit's height is one more than its highest parent's (0 without parents): an
%% ancestor is always lower than its descendants.</li>
%% <li>{@link merge_commits/3} is commutative in its two commits.</li>
%% <li>History collection ({@link gc_plan/3}) deletes only the strict ancestors of a commit
%% `B' that every root descends from and that every commit reachable from the roots is
%% comparable with (an ancestor or a descendant): then every LCA of two commits that descend
%% from the roots descends from `B', so merges never need what was deleted. A deleted
%% commit's record stays while its pack holds a block `B''s tree shares (the only old blocks
%% a kept commit can share). Objects are deleted only when a deleted commit's value reaches
%% them and no kept commit's value does; an object no commit reaches yet (stored for a
%% publish under way) is never deleted.</li>
%% </ul>
-module(hm_mrdt_history).

-export([store/1, store/2, get/2, put/3, writes/1, new_commits/1, open_commit/1, nonce/1,
         set_nonce/2, set_max_graft/2, known/2, with_known/2]).
-export([commit/3, commit_info/2, tree_of/2, packs/2, lookup/3, read/3, write_tree/3,
         repack/2, put_objects/2, entries/2]).
-export([lcas/3, is_ancestor/3, merge_commits/3, merge_writes/4, merge_writes/5, merge_trees/4,
         complete/2, max_graft/1, gc_plan/3]).
-export_type([store/0, hash/0, key/0, fetch_key/0, commit/0, entry/0, tree/0, gc_plan/0]).

-define(BUCKETS, 64).
%% Values up to this many bytes (external format) are kept in their leaf, not in a blob.
-define(INLINE, 256).

-type hash() :: hm_mrdt:hash().
-type key() :: {block, hash()} | {obj, hash()} | {graft, hash()} | {cache, [hash()]}.
%% Keys a store's `Fetch' may also be asked, and may answer `not_found' to: `{block, Home,
%% Hash}' (one block of commit `Home''s pack, without copying the pack), `{head, Commit}'
%% (the commit's record without its pack: `{commit, Parents, Tree, Height}') and `{member,
%% Key}' (`{ok, boolean()}': whether `Key' is there, without reading it).
-type fetch_key() :: key() | {block, hash(), hash()} | {member, key()} | {head, hash()}.
-type commit() :: hash() | none.
-type ref() :: {hash() | pending, hash()}.
-type entry() :: {module(), ref() | {v, term()}}.
%% A tree: `empty', or the commit (`pending': this step's commit-to-be) whose record holds
%% its bucket map, and that map (bucket to leaf; a hash alone names a leaf of that commit's
%% pack, `{Home, Hash}' one of commit `Home''s pack).
-type tree() :: empty | {hash() | pending, #{non_neg_integer() => hash() | ref()}}.
-opaque store() :: #{fetch := fun((fetch_key()) -> {ok, term()} | not_found),
                     new := #{key() => term()},
                     known := #{fetch_key() => term()},
                     pending := #{hash() => term()},
                     order := [key()],
                     nonce := term(),
                     mark := term(),
                     max_graft := integer()}.
-type gc_plan() :: #{floor := hash() | none, delete := [key()], graft := [key()]}.

%%% ------------------------------------------------------------------ store

%% @doc A store over `Fetch', with nonce `none'.
-spec store(fun((fetch_key()) -> {ok, term()} | not_found)) -> store().
store(Fetch) -> store(Fetch, none).

%% @doc A store over `Fetch' whose new blocks carry `Nonce'.
-spec store(fun((fetch_key()) -> {ok, term()} | not_found), term()) -> store().
store(Fetch, Nonce) ->
    #{fetch => Fetch, new => #{}, known => #{}, pending => #{}, order => [], nonce => Nonce,
      mark => mark(Nonce),
      max_graft => -1}.

%% @doc Tell the store the height of the highest `{graft, _}' it holds (the caller finds it
%% by scanning its grafts; -1 when there is none).
-spec set_max_graft(store(), integer()) -> store().
set_max_graft(St, H) -> St#{max_graft := H}.

%% @doc Read a key: what this step added, else a block the caller already holds
%% ({@link with_known/2}), else the underlying store.
-spec get(store(), key()) -> {ok, term()} | not_found.
get(St = #{fetch := Fetch}, K) ->
    case held(St, K) of
        {ok, V} -> {ok, V};
        none -> Fetch(K)
    end.

%% What this step added under `K', else what the caller holds (`none': neither).
held(#{new := New, known := Known}, K) ->
    case New of
        #{K := V} -> {ok, V};
        _ -> case Known of
                 #{K := V} -> {ok, V};
                 _ -> none
             end
    end.

%% @doc The record of commit `C', which every read of it needs: its parents, its tree (a
%% bucket map of 64 hashes, the largest part a read copies out of the table) and its pack
%% (the leaves and blobs it created). Records are immutable, so a process may keep them and
%% hand them back to later stores ({@link with_known/2}) instead of reading them again: a
%% session for its base, a node for its head. Both are roots, which collection never
%% deletes. `#{}' for `none' or a commit not in the store.
-spec known(store(), commit()) -> #{fetch_key() => term()}.
known(_, none) -> #{};
known(St, C) ->
    case header(St, C) of
        {ok, Hd} -> #{{head, C} => Hd};
        not_found -> #{}
    end.

%% @doc `St' reading the blocks of `Known' (from {@link known/2}) without fetching them.
-spec with_known(store(), #{fetch_key() => term()}) -> store().
with_known(St, Known) -> St#{known := Known}.

%% @doc Add a key (written by {@link writes/1}).
-spec put(store(), key(), term()) -> store().
put(St = #{new := New, order := Order}, K, V) ->
    case New of
        #{K := _} -> St;
        _ -> St#{new := New#{K => V}, order := [K | Order]}
    end.

%% @doc What this step added, in the order it was added; commits in their stored form.
-spec writes(store()) -> [{key(), term()}].
writes(#{new := New, order := Order}) ->
    [{K, stored(K, maps:get(K, New))} || K <- lists:reverse(Order)].

%% A commit's record is stored with its tree and its pack in external format: the record's
%% bulk is then two binaries, which the EC table copies by reference (into its process, its
%% storage and its metadata) instead of copying every term of a tree and a pack several
%% times; only the wire copies the bytes.
stored({block, _}, {commit, Ps, T, H, P}) when not is_binary(T) ->
    {commit, Ps, term_to_binary(T), H, term_to_binary(P)};
stored(_, V) -> V.

%% @doc The commits this step made, `{Hash, Record}', each record opened
%% ({@link open_commit/1}).
-spec new_commits(store()) -> [{hash(), tuple()}].
new_commits(#{new := New}) -> [{C, R} || {{block, C}, {commit, _, _, _, _} = R} <- maps:to_list(New)].

%% @doc A commit's record with its tree and its pack as terms, `{commit, Parents, Tree,
%% Height, Pack}', from its stored form. A record already open is returned as it is: this
%% step's own records stay open until {@link writes/1}, and a table may hold open records.
-spec open_commit(tuple()) -> tuple().
open_commit({commit, Ps, T, H, P}) when is_binary(T) ->
    {commit, Ps, binary_to_term(T), H, binary_to_term(P)};
open_commit({commit, _, _, _, _} = R) -> R.

%% A commit's record without its pack, `{commit, Parents, Tree, Height}'.
head_of({commit, Ps, T, H, _}) when is_binary(T) -> {commit, Ps, binary_to_term(T), H};
head_of({commit, Ps, T, H, _}) -> {commit, Ps, T, H}.

-spec nonce(store()) -> term().
nonce(#{nonce := N}) -> N.

-spec set_nonce(store(), term()) -> store().
set_nonce(St, N) -> St#{nonce := N, mark := mark(N)}.

%% What each new leaf and blob carries of the step's nonce: its hash, unless the nonce is
%% as small. A publish's nonce names every session of the group commit, about 40 bytes
%% each, and every block the step creates would carry it all, a large part of a commit's
%% bytes when many sessions publish at once; the hash is as unique a name.
mark(none) -> none;
mark(N) ->
    case erlang:external_size(N) =< 40 of
        true -> N;
        false -> hm_mrdt:hash(N)
    end.

%% A block of this step's commit-to-be: kept aside until {@link commit/3} packs it into the
%% commit's record. Its reference is `{pending, Hash}' until then.
put_block(St = #{pending := P}, Block) ->
    H = hm_mrdt:hash(Block),
    {{pending, H}, St#{pending := P#{H => Block}}}.

%% Block `H' of the pack of commit `Home' (`pending': this step's).
block_at(#{pending := P}, pending, H) ->
    case P of
        #{H := B} -> B;
        _ -> throw({missing, {block, pending}})
    end;
block_at(St = #{fetch := Fetch}, Home, H) ->
    K = {block, Home},
    case held(St, K) of
        {ok, R1} -> in_pack(R1, Home, H);
        none ->
            %% a store may answer for one block of a pack without copying the whole pack
            %% (hm_mrdt_store keeps unpacked blocks); a map answers not_found
            case Fetch({block, Home, H}) of
                {ok, B} -> B;
                not_found ->
                    case Fetch(K) of
                        {ok, R2} -> in_pack(R2, Home, H);
                        not_found -> throw({missing, K})
                    end
            end
    end.

in_pack(Rec, Home, H) ->
    {commit, _, _, _, Pack} = open_commit(Rec),
    case Pack of
        #{H := B} -> B;
        _ -> throw({missing, {block, Home}})
    end.

%% Whether `K' is in the store, without reading it where the store can tell.
has(St = #{new := New, known := Known, fetch := Fetch}, K) ->
    is_map_key(K, New) orelse is_map_key(K, Known) orelse
        case Fetch({member, K}) of
            {ok, B} -> B;
            not_found -> get(St, K) =/= not_found
        end.

%% References: inside a stored tree or leaf, a hash alone names a block of the same pack, and
%% `{Home, Hash}' one of commit `Home''s pack. Read, every reference is made absolute.
abs(Ctx, H) when is_binary(H) -> {Ctx, H};
abs(_, {_, _} = R) -> R.
%% Stored, a reference `{pending, Hash}' to this step's pack is the hash alone (rel_refs/1).

%%% ------------------------------------------------------------------ commits and trees

%% @doc Store a commit of `Tree' (`empty' or a tree from {@link tree_of/2},
%% {@link write_tree/3} or {@link merge_trees/4}) with `Parents'. The commit's record holds
%% its tree and, in its pack, every leaf and blob this step created: one record per commit.
-spec commit(store(), [hash()], tree()) -> {hash(), store()}.
commit(St, Parents, Tree) ->
    Height = lists:max([-1 | [height(St, P) || P <- Parents]]) + 1,
    Stored = case Tree of
                 empty -> empty;
                 {pending, M} -> M;
                 {Ctx, M} -> abs_refs(Ctx, M)
             end,
    Pack = maps:get(pending, St),
    Block = {commit, lists:sort(Parents), Stored, Height, Pack},
    %% the pack's keys are the hashes of its blocks: hashing them rather than the blocks
    %% covers the same content without hashing every block's bytes a second time
    C = hm_mrdt:hash({commit, lists:sort(Parents), Stored, Height, lists:sort(maps:keys(Pack))}),
    {C, (put(St, {block, C}, Block))#{pending := #{}}}.

height(St, C) ->
    case header(St, C) of
        {ok, {commit, _, _, H}} -> H;
        _ -> 0
    end.

%% A commit's record without its pack: `{ok, {commit, Parents, StoredTree, Height}}'.
header(#{new := New, known := Known, fetch := Fetch}, C) ->
    case New of
        #{{block, C} := {commit, Ps, T, H, _}} -> {ok, {commit, Ps, T, H}};
        _ ->
            case Known of
                #{{head, C} := Hd} -> {ok, Hd};
                _ ->
                    case Fetch({head, C}) of
                        {ok, Hd} -> {ok, Hd};
                        not_found ->
                            case Fetch({block, C}) of
                                {ok, {commit, _, _, _, _} = R} -> {ok, head_of(R)};
                                _ -> not_found
                            end
                    end
            end
    end.

%% @doc The parents, tree and height of a commit, or `not_found'.
-spec commit_info(store(), hash()) -> {ok, {[hash()], tree(), non_neg_integer()}} |
          not_found.
commit_info(St, C) ->
    case header(St, C) of
        {ok, {commit, Ps, T, H}} -> {ok, {Ps, tree(C, T), H}};
        not_found -> not_found
    end.

tree(_, empty) -> empty;
tree(C, M) -> {C, M}.

%% @doc The tree of a commit (`empty' for `none').
-spec tree_of(store(), commit()) -> tree().
tree_of(_, none) -> empty;
tree_of(St, C) ->
    case header(St, C) of
        {ok, {commit, _, T, _}} -> tree(C, T);
        not_found -> throw({missing, {block, C}})
    end.

%% @doc The commits whose packs hold the leaves and blobs a commit's tree reaches (itself
%% included when it created some).
-spec packs(store(), hash()) -> [hash()].
packs(St, C) ->
    lists:usort([Home || {Home, _} <- maps:keys(reach_blocks(St, [C]))]).

bucket(Key) -> erlang:phash2(Key, ?BUCKETS).

%% The bucket map with absolute references.
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

%% A leaf's entries, blob references absolute.
leaf(_, none) -> #{};
leaf(St, {Home, L}) ->
    {leaf, Es, _} = block_at(St, Home, L),
    replace(Es, [{K, {T, {Home, H}}} || {K, {T, H}} <- maps:to_list(Es), is_binary(H)]).

%% @doc The entry `{Type, BlobRef | {v, Value}}' of `Key' in a tree.
-spec lookup(store(), tree(), term()) -> {ok, entry()} | not_found.
lookup(St, T, Key) ->
    case bucket_leaf(T, bucket(Key)) of
        {ok, {Home, L}} ->
            {leaf, Es, _} = block_at(St, Home, L),
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

blob(_, {v, V}) -> V;
blob(St, {Home, B}) ->
    {blob, _, V, _} = block_at(St, Home, B),
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
                                              {blob, _, V, _} = block_at(SA, element(1, B),
                                                                         element(2, B)),
                                              {R, SA1} = put_block(SA, {blob, Ty, V, maps:get(mark, SA)}),
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
        true -> put(St, {obj, hm_mrdt:hash(V)}, V);
        false -> St
    end.

put_blob(St, Type, V) ->
    St1 = put_object(St, Type, V),
    case erlang:external_size(V) =< ?INLINE of
        true -> {{v, V}, St1};
        false -> put_block(St1, {blob, Type, V, maps:get(mark, St)})
    end.

%% A new leaf of this step (`Es' with absolute references).
put_leaf(St, Es) ->
    put_block(St, {leaf, replace(Es, [{K, {T, H}} || {K, {T, {pending, H}}} <- maps:to_list(Es)]),
                   maps:get(mark, St)}).

%% A tree of this step from a bucket map with absolute references.
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

%%% ------------------------------------------------------------------ ancestry

%% @doc Whether `X' is an ancestor of `Y' (or `Y' itself). Walks back from `Y' no lower than
%% `X''s height; stops at grafts and at commits not in the store.
-spec is_ancestor(store(), hash(), hash()) -> boolean().
is_ancestor(_, X, X) -> true;
is_ancestor(St, X, Y) ->
    case commit_info(St, X) of
        {ok, {_, _, HX}} -> walk_to(St, X, HX, [Y], #{});
        not_found -> false
    end.

walk_to(_, _, _, [], _) -> false;
walk_to(_, X, _, [X | _], _) -> true;
walk_to(St, X, HX, [C | Cs], Seen) ->
    case Seen of
        #{C := _} -> walk_to(St, X, HX, Cs, Seen);
        _ ->
            Next = case commit_info(St, C) of
                       {ok, {Ps, _, H}} when H > HX -> parents(St, C, Ps);
                       _ -> []
                   end,
            walk_to(St, X, HX, Next ++ Cs, Seen#{C => true})
    end.

parents(St, C, Ps) ->
    case get(St, {graft, C}) of
        {ok, _} -> [];
        not_found -> Ps
    end.

%% #{Commit => Parents} for every commit reachable from Cs, not expanding Stop.
ancestors(St, Cs, Stop) -> ancestors(St, Cs, Stop, #{}).

ancestors(_, [], _, Acc) -> Acc;
ancestors(St, [C | Cs], Stop, Acc) ->
    case Acc of
        #{C := _} -> ancestors(St, Cs, Stop, Acc);
        _ ->
            Ps = case commit_info(St, C) of
                     {ok, {Ps0, _, _}} when C =/= Stop -> parents(St, C, Ps0);
                     {ok, _} -> [];
                     not_found -> missing
                 end,
            case Ps of
                missing -> ancestors(St, Cs, Stop, Acc);
                _ -> ancestors(St, Ps ++ Cs, Stop, Acc#{C => Ps})
            end
    end.

%% @doc The lowest common ancestors of two commits: the common ancestors that are not an
%% ancestor of another common ancestor (`[]': no shared history).
-spec lcas(store(), hash(), hash()) -> [hash()].
lcas(_, A, A) -> [A];
lcas(St, A, B) ->
    case {is_ancestor(St, A, B), is_ancestor(St, B, A)} of
        {true, _} -> [A];
        {_, true} -> [B];
        _ -> maximal(common([ancestors(St, [A], none), ancestors(St, [B], none)]))
    end.

common([M | Ms]) ->
    lists:foldl(fun(M2, Acc) -> maps:filter(fun(K, _) -> is_map_key(K, M2) end, Acc) end,
                M, Ms).

%% Common is closed under ancestors: its maximal elements are those no member names as a
%% parent.
maximal(Common) ->
    NotMax = maps:from_list([{P, true} || Ps <- maps:values(Common), P <- Ps]),
    lists:sort([C || C <- maps:keys(Common), not is_map_key(C, NotMax)]).

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
    case lcas(St, A, B) of
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
    {M, St2} = case get(St, Key) of
                   {ok, Cached} -> {Cached, St};
                   not_found ->
                       {ok, M1, St1} = merge_c(St, L1, L2),
                       {M1, put(St1, Key, M1)}
               end,
    merged_lca(St2, [M | Ls]).

three_way(St0, L, A, B) ->
    Nonce0 = nonce(St0),
    St1 = set_nonce(St0, {merge, lists:sort([A, B])}),
    case merge_trees(St1, tree_of(St1, L), tree_of(St1, A), tree_of(St1, B)) of
        {ok, T, St2} ->
            {C, St3} = commit(St2, [A, B], T),
            {ok, C, set_nonce(St3, Nonce0)};
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
    EOld = lookup(St, Old, K),
    Now = case Over of
              #{K := {TO, VO}} -> {value, TO, VO};
              _ -> lookup(St, New, K)
          end,
    case Now of
        {ok, {T2, _}} when T2 =/= T -> throw({conflict, {K, {type_mismatch, T2, T}}});
        {value, T2, _} when T2 =/= T -> throw({conflict, {K, {type_mismatch, T2, T}}});
        EOld -> {T, V};
        not_found -> {T, V};
        _ ->
            L = case EOld of
                    {ok, {T, HL}} -> blob(St, HL);
                    _ -> none
                end,
            A = case Now of
                    {ok, {_, HA}} -> blob(St, HA);
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
        {BL, BA, BB} = {buckets(L), buckets(A), buckets(B)},
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
           true -> {ok, new_tree(Bs), St1}
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
    {EA, EB} = {leaf(St0, LA), leaf(St0, LB)},
    {Es, St} = merge_leaves(St0, leaf(St0, LL), EA, EB, #{}),
    Merged = maps:filter(fun(_, E) -> E =/= none end, Es),
    %% both sides changed the bucket: a new leaf even when the merged entries equal one
    %% side's, so that a leaf names one history (see merge_trees/4)
    case map_size(Merged) of
        0 -> {none, St};
        _ -> put_leaf(St, Merged)
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
             {ok, {T, HL}} -> blob(St, HL);
             _ -> none
         end,
    case hm_mrdt:merge(T, LV, blob(St, HA), blob(St, HB)) of
        {ok, V} ->
            {H, St1} = put_blob(St, T, V),
            {{T, H}, St1};
        {conflict, R} -> throw({conflict, {K, R}})
    end;
merge_entry(_, K, _, {ok, {TA, _}}, {ok, {TB, _}}) ->
    throw({conflict, {K, {type_mismatch, TA, TB}}}).

found({ok, E}) -> E;
found(error) -> none.

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
        Collected = max_graft(St) >= H - 1 orelse get(St, {graft, C}) =/= not_found,
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
    case has(St, K) of
        true -> ok;
        false -> throw({missing, K})
    end.

present(St, K) ->
    case get(St, K) of
        {ok, _} -> ok;
        not_found -> throw({missing, K})
    end.

%% @doc The height of the highest graft in the store (-1 if none), as the caller set it
%% ({@link set_max_graft/2}), or raised by this step's grafts.
-spec max_graft(store()) -> integer().
max_graft(#{max_graft := H}) -> H.

%%% ------------------------------------------------------------------ collection

%% @doc What history collection may delete, given the roots (every node's public branch and
%% the bases of every open session) and the cache entries in the store. Finds the floor `B':
%% the single maximal common ancestor of all roots, if every commit reachable from the roots
%% without passing `B' is a descendant of `B'. Deletes the records of `B''s strict ancestors
%% and of the merge commits only the cache entries naming one of them named (and those
%% entries), but not of a commit whose pack holds a leaf or blob `B''s tree shares (it is
%% named again, through the dead trees that reach it, once a later floor no longer shares
%% it), and the objects (values of linked types) that their values reach and no kept
%% commit's values reach. `graft' must be written before `delete'. Nothing when a root
%% is missing or `none' (a node whose branch is empty may merge any commit next), or there
%% is no such floor.
-spec gc_plan(store(), [commit()], [{[hash()], hash()}]) -> gc_plan().
gc_plan(St, Roots0, Cache) ->
    Roots = lists:usort(Roots0),
    None = #{floor => none, delete => [], graft => []},
    %% a root `none' (a node with an empty branch) may merge any old commit next: keep all
    case Roots =/= [] andalso not lists:member(none, Roots) andalso
        lists:all(fun(R) -> commit_info(St, R) =/= not_found end, Roots) of
        false -> None;
        true ->
            try plan(St, Roots, Cache, None)
            catch throw:{missing, _} -> None
            end
    end.

plan(St, Roots, Cache, None) ->
    %% fast path: the lowest root is often the floor (a session's base, a lagging branch);
    %% one walk down to its height decides
    {_, Low} = lists:min([{element(3, element(2, commit_info(St, R))), R} || R <- Roots]),
    plan_from(St, Low, Roots, Cache, None, 20).

%% Try candidate B; a walk that escapes below it (a commit reaching older history, such as
%% a publish on an old session base) proposes the lowest commit it escaped to.
plan_from(St, B, Roots, Cache, None, Tries) ->
    case above(St, B, Roots) of
        {ok, Above} -> plan_below(St, B, Above, Cache, None);
        {escaped, X} when Tries > 0, X =/= B -> plan_from(St, X, Roots, Cache, None, Tries - 1);
        _ when length(Roots) =< 8 -> plan_general(St, Roots, Cache, None);
        _ -> None
    end.

plan_general(St, Roots, Cache, None) ->
    case maximal(common([ancestors(St, [R], none) || R <- Roots])) of
        [B] ->
            Above = ancestors(St, Roots, B),
            Below = maps:remove(B, ancestors(St, [B], none)),
            case lists:any(fun(C) -> is_map_key(C, Below) end, maps:keys(Above)) of
                true -> None;
                false -> plan_below(St, B, Above, Cache, None)
            end;
        _ -> None
    end.

plan_below(St, B, Above, Cache, None) ->
    Below = maps:remove(B, ancestors(St, [B], none)),
    case map_size(Below) of
        0 -> None;
        _ -> plan(St, B, Above, Below, Cache)
    end.

%% {ok, commits reachable from Roots down to B} if every path from every root reaches B
%% (B is a common ancestor that every reachable commit is comparable with); else
%% {escaped, X}, X the lowest commit a path reached instead (not above B), or false.
above(St, B, Roots) ->
    {ok, {_, _, HB}} = commit_info(St, B),
    above(St, B, HB, Roots, #{}, none).

above(_, _, _, [], Acc, none) -> {ok, Acc};
above(_, _, _, [], _, {_, X}) -> {escaped, X};
above(St, B, HB, [B | Cs], Acc, Esc) -> above(St, B, HB, Cs, Acc#{B => []}, Esc);
above(St, B, HB, [C | Cs], Acc, Esc) when is_map_key(C, Acc) -> above(St, B, HB, Cs, Acc, Esc);
above(St, B, HB, [C | Cs], Acc, Esc) ->
    case commit_info(St, C) of
        {ok, {Ps0, _, H}} when H > HB ->
            case parents(St, C, Ps0) of
                [] -> false;                     % a root of history (or a graft) not above B
                Ps -> above(St, B, HB, Ps ++ Cs, Acc#{C => Ps}, Esc)
            end;
        {ok, {_, _, H}} when Esc =:= none -> above(St, B, HB, Cs, Acc#{C => []}, {H, C});
        {ok, {_, _, H}} -> above(St, B, HB, Cs, Acc#{C => []}, min(Esc, {H, C}));
        not_found -> false
    end.

plan(St, B, Above, Below, Cache) ->
    {DropCache, KeepCache} = lists:partition(
                               fun({Ls, _}) -> lists:any(fun(L) -> is_map_key(L, Below) end, Ls) end,
                               Cache),
    Kept = maps:merge(Above, maps:from_list([{V, true} || {_, V} <- KeepCache])),
    DeadCommits = lists:usort(maps:keys(Below) ++
                                  [V || {_, V} <- DropCache, not is_map_key(V, Kept),
                                        commit_info(St, V) =/= not_found]),
    %% A kept commit's tree holds blocks created with it (new names) or taken from its
    %% parents' trees, and every path down from a kept commit passes B: so the only old
    %% blocks a kept commit can share with the deleted ones are those of B's tree. A block
    %% lives in the pack of the commit that created it: a deleted commit whose pack holds a
    %% block of B's tree stays (pinned) until a later floor no longer reaches it; the dead
    %% trees that reach it (B's, then) name it again then.
    Live = reach_blocks(St, [B]),
    LiveHomes = maps:from_list([{B, true} | [{Home, true} || {Home, _} <- maps:keys(Live)]]),
    Dead = reach_blocks(St, DeadCommits),
    Deleted = [C || C <- lists:usort(DeadCommits ++ [Home || {Home, _} <- maps:keys(Dead)]),
                    not is_map_key(C, LiveHomes), not is_map_key(C, Kept)],
    {_, _, HB} = element(2, commit_info(St, B)),
    Grafts = [{graft, C} || C <- DeadCommits, get(St, {graft, C}) =/= not_found],
    Objects = [{obj, H} || H <- dead_objects(St, Dead, maps:keys(Kept))],
    #{floor => B,
      graft => [{{graft, B}, HB}],
      delete => [{cache, Ls} || {Ls, _} <- DropCache] ++ [{block, C} || C <- Deleted]
          ++ Grafts ++ Objects}.

%% Objects (values of linked types, `{obj, Hash}') that the values of the deleted commits
%% reach and the values of no kept commit reach. Objects carry no nonce: a kept value may
%% refer to any old one (a log's tail), so what is live is found by walking from the kept
%% values, not from the floor alone. The walk from the kept values stops as soon as it has
%% met every value the deleted commits hold (then everything those reach is kept); only
%% when some is not met is it walked whole. Objects no commit reaches at all (written for a
%% publish not carried out yet) are never deleted: they may be about to be referred to.
dead_objects(St, DeadBlocks, KeptCommits) ->
    case linked_values(St, leaves(DeadBlocks)) of
        [] -> [];
        DeadRoots ->
            LiveRoots = linked_values(St, leaves(reach_blocks(St, KeptCommits))),
            Wanted = maps:from_list([{H, true} || {_, H} <- DeadRoots]),
            case walk_objects(St, LiveRoots, #{}, Wanted) of
                {all_met, _} -> [];
                {done, Live} ->
                    {done, Reached} = walk_objects(St, [R || R = {_, H} <- DeadRoots,
                                                             not is_map_key(H, Live)],
                                                  Live, none),
                    [H || H <- maps:keys(Reached), not is_map_key(H, Live)]
            end
    end.

%% `{Type, Hash}' of every value of a linked type held by these leaves.
linked_values(St, Blocks) ->
    lists:usort(
      [{T, hm_mrdt:hash(blob(St, E))}
       || R <- Blocks, {T, E} <- maps:values(leaf_or_none(St, R)), hm_mrdt:is_linked(T)]).

leaf_or_none(St, R) ->
    try leaf(St, R)
    catch throw:{missing, _} -> #{}
    end.

%% Walk objects from `Roots', following each value's references, not entering `Seen0''s
%% keys. `{all_met, Seen}' as soon as every key of `Wanted' was met (`Wanted' `none': never),
%% else `{done, Seen}': every object reached (the objects missing from the store are
%% skipped; new ones are kept by default).
walk_objects(St, Roots, Seen0, Wanted) ->
    Left = case Wanted of
               none -> -1;
               _ -> map_size(Wanted)
           end,
    walk_objects(St, Roots, Seen0, Wanted, Left).

walk_objects(_, _, Seen, _, 0) -> {all_met, Seen};
walk_objects(_, [], Seen, _, _) -> {done, Seen};
walk_objects(St, [{_, H} | Rest], Seen, Wanted, Left) when is_map_key(H, Seen) ->
    walk_objects(St, Rest, Seen, Wanted, Left);
walk_objects(St, [{T, H} | Rest], Seen, Wanted, Left) ->
    Left1 = case Wanted of
                #{H := _} -> Left - 1;
                _ -> Left
            end,
    Next = case get(St, {obj, H}) of
               {ok, V} -> [{T, R} || R <- hm_mrdt:refs(T, V)];
               not_found -> []
           end,
    walk_objects(St, Next ++ Rest, Seen#{H => true}, Wanted, Left1).

leaves(Reached) -> [R || {R, leaf} <- maps:to_list(Reached)].

%% The leaves and blobs the commits' trees reach: `#{{Home, Hash} => leaf | blob}'. A pack
%% already deleted (by another node's collection) is skipped.
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
