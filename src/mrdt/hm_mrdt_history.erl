%% @doc The store of a repository's content-addressed history, as pure functions: a read-only
%% view of what is stored, an overlay of what this step added, and the step's nonce. Every
%% function of the history reads and writes through it. After "Banyan: Coordination-free
%% Distributed Transactions over Mergeable Types", section 4.1 (the Git object model); the
%% history itself is in:
%% <ul>
%% <li>{@link hm_mrdt_commits}: commits, their trees, leaves and blobs, reading and writing
%% keys in a tree, and whether a commit was fully received (sections 4.1 and 4.2);</li>
%% <li>{@link hm_mrdt_ancestry}: ancestors and the lowest common ancestors (LCAs) of two
%% commits;</li>
%% <li>{@link hm_mrdt_merge}: three-way merges of trees and commits, and the recursive merge
%% of criss-cross histories with a cache of merged LCAs (section 4.3);</li>
%% <li>{@link hm_mrdt_collect}: the history collection plan (section 4.4, which Banyan
%% sketches and Hypermnesia implements).</li>
%% </ul>
%%
%% == Store ==
%% A {@link store()} reads a read-only `Fetch' function over the keys below (the local copy
%% of an EC table at run time, a map in the simulator) under an overlay of what this step
%% added. {@link writes/1} gives the step's effects, to be written in order. Keys and values:
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
%% Blocks of a step wait aside (`pending') until {@link hm_mrdt_commits:commit/3} packs
%% them.</li>
%% <li>A key is added once: adding it again keeps the first value (content-addressed keys
%% name one value).</li>
%% </ul>
-module(hm_mrdt_history).

-export([store/1, store/2, get/2, put/3, writes/1, new_commits/1, open_commit/1, nonce/1,
         set_nonce/2, set_max_graft/2, max_graft/1, known/2, with_known/2]).
%% For the other history modules: the blocks of a pack, and the parts of the overlay that
%% only a commit needs.
-export([header/2, has/2, put_block/2, block_at/3, block_mark/1, take_pack/1]).
-export_type([store/0, hash/0, key/0, fetch_key/0, commit/0, ref/0]).

-type hash() :: hm_mrdt:hash().
-type key() :: {block, hash()} | {obj, hash()} | {graft, hash()} | {cache, [hash()]}.
%% Keys a store's `Fetch' may also be asked, and may answer `not_found' to: `{block, Home,
%% Hash}' (one block of commit `Home''s pack, without copying the pack), `{head, Commit}'
%% (the commit's record without its pack: `{commit, Parents, Tree, Height}') and `{member,
%% Key}' (`{ok, boolean()}': whether `Key' is there, without reading it).
-type fetch_key() :: key() | {block, hash(), hash()} | {member, key()} | {head, hash()}.
-type commit() :: hash() | none.
%% A reference to a leaf or blob: `{Home, Hash}', block `Hash' of commit `Home''s pack
%% (`pending': this step's commit-to-be).
-type ref() :: {hash() | pending, hash()}.
-opaque store() :: #{fetch := fun((fetch_key()) -> {ok, term()} | not_found),
                     new := #{key() => term()},
                     known := #{fetch_key() => term()},
                     pending := #{hash() => term()},
                     order := [key()],
                     nonce := term(),
                     mark := term(),
                     max_graft := integer()}.

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
new_commits(#{new := New}) ->
    [{C, R} || {{block, C}, {commit, _, _, _, _} = R} <- maps:to_list(New)].

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

%% @doc What each leaf and blob this step creates carries of the step's nonce.
-spec block_mark(store()) -> term().
block_mark(#{mark := M}) -> M.

%% @doc The blocks waiting for this step's commit (`#{Hash => Block}'), and the store
%% without them: {@link hm_mrdt_commits:commit/3} packs them into the commit's record.
-spec take_pack(store()) -> {#{hash() => term()}, store()}.
take_pack(St = #{pending := P}) -> {P, St#{pending := #{}}}.

%% @doc Add a block of this step's commit-to-be: kept aside until
%% {@link hm_mrdt_commits:commit/3} packs it into the commit's record ({@link take_pack/1}).
%% Its reference is `{pending, Hash}' until then.
-spec put_block(store(), term()) -> {ref(), store()}.
put_block(St = #{pending := P}, Block) ->
    H = hm_mrdt:hash(Block),
    {{pending, H}, St#{pending := P#{H => Block}}}.

%% @doc Block `H' of the pack of commit `Home' (`pending': this step's). Throws
%% `{missing, Key}' when it is not in the store.
-spec block_at(store(), hash() | pending, hash()) -> term().
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

%% @doc Whether `K' is in the store, without reading it where the store can tell.
-spec has(store(), key()) -> boolean().
has(St = #{new := New, known := Known, fetch := Fetch}, K) ->
    is_map_key(K, New) orelse is_map_key(K, Known) orelse
        case Fetch({member, K}) of
            {ok, B} -> B;
            not_found -> get(St, K) =/= not_found
        end.

%% @doc A commit's record without its pack: `{ok, {commit, Parents, StoredTree, Height}}',
%% or `not_found'. In `StoredTree' a hash alone names a leaf of the commit's own pack.
-spec header(store(), hash()) -> {ok, tuple()} | not_found.
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

%% @doc The height of the highest graft in the store (-1 if none), as the caller set it
%% ({@link set_max_graft/2}), or raised by this step's grafts.
-spec max_graft(store()) -> integer().
max_graft(#{max_graft := H}) -> H.
