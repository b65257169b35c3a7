%% @doc Merkle tree over the keys of one replica group, and the pure steps of a Merkle-tree
%% anti-entropy exchange: the baseline the DottedDB paper measures its node-clock exchange
%% against (*DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones*, §III.A.1
%% "Merkle Trees" and §V.B "MerkleDB").
%%
%% == Tree shape ==
%% A complete tree of fixed fan-out `F' and depth `D' (defaults 16 and 3: 4,096 leaves). A
%% node is `{Level, Index}', the root `{0, 0}', the children of `{L, I}' are
%% `{L + 1, I * F + J}' for `J' in `0..F-1', the leaves are at level `D'. A key lives in leaf
%% `erlang:phash2(Key, F^D)': keys are spread uniformly, as consistent hashing spreads them,
%% so there is no locality to exploit. A leaf holds the list of `{Key, Hash}' pairs of its
%% keys (the hash of the object's live versions, given by the caller); its own hash is the
%% hash of that sorted list; an inner node's hash is the hash of its children's hashes. An
%% empty subtree hashes to 0 and is not stored, so the tree's memory is the key-hash lists
%% plus the non-empty inner nodes. The accuracy/size trade-off of the paper: with `K' keys,
%% a leaf holds about `K / F^D' keys, and a single differing key costs `D' rounds of `F'
%% hashes plus one leaf's key-hash list.
%%
%% == Exchange ==
%% Two copies compare trees level by level, alternating who speaks:
%% <ol>
%% <li>{@link start/1}: the initiator sends `{nodes, [{Root, Hash}]}';</li>
%% <li>{@link compare/2} of `{nodes, L}': the receiver keeps the nodes whose hash differs
%% from its own; none: `done'; leaves: it answers `{leaves, [{Leaf, KeyHashes}]}'; inner
%% nodes: it answers `{nodes, Children}' with its hashes of their children;</li>
%% <li>{@link compare/2} of `{leaves, L}': the keys whose hash differs, or that only one side
%% has: `{keys, Keys}'. The caller then exchanges those objects (see {@link hm_dotted_sync}).</li>
%% </ol>
%% Hashes are `erlang:phash2/2' over 32 bits: a baseline for metadata and traffic, not a
%% cryptographic digest (a collision leaves a key unrepaired until it changes again).
%%
%% Invariants: the stored hash of every inner node is the hash of its children's; an empty
%% leaf or subtree is absent; two trees with the same key-hash pairs are equal terms.
-module(hm_merkle).

-export([new/0, new/1, put/3, remove/2, root/1, node_hash/2, leaf/2, leaf_list/2,
         start/1, compare/2, keys/1, size/1, shape/1, hash/1]).
-export_type([tree/0, tree_node/0, msg/0, shape/0]).

-define(EMPTY, 0).
-define(RANGE, 4294967296).

-type tree_node() :: {non_neg_integer(), non_neg_integer()}.
-type shape() :: #{fanout := pos_integer(), depth := pos_integer()}.
-type msg() :: {nodes, [{tree_node(), non_neg_integer()}]}
             | {leaves, [{tree_node(), [{term(), non_neg_integer()}]}]}.
-opaque tree() :: #{fanout := pos_integer(), depth := pos_integer(),
                    leaves := #{non_neg_integer() => #{term() => non_neg_integer()}},
                    inner := #{tree_node() => non_neg_integer()}}.

%% @doc An empty tree of fan-out 16 and depth 3.
-spec new() -> tree().
new() -> new(#{fanout => 16, depth => 3}).

%% @doc An empty tree of the given shape.
-spec new(shape()) -> tree().
new(#{fanout := F, depth := D}) when is_integer(F), F >= 2, is_integer(D), D >= 1 ->
    #{fanout => F, depth => D, leaves => #{}, inner => #{}}.

%% @doc The shape of a tree.
-spec shape(tree()) -> shape().
shape(#{fanout := F, depth := D}) -> #{fanout => F, depth => D}.

%% @doc The 32-bit hash the tree uses (the caller hashes objects with it too).
-spec hash(term()) -> non_neg_integer().
hash(T) -> erlang:phash2(T, ?RANGE).

%% @doc The leaf a key lives in.
-spec leaf(term(), tree()) -> tree_node().
leaf(Key, #{fanout := F, depth := D}) -> {D, erlang:phash2(Key, pow(F, D))}.

%% @doc Set the hash of `Key''s object, updating the hashes up to the root.
-spec put(term(), non_neg_integer(), tree()) -> tree().
put(Key, H, T = #{leaves := Ls}) ->
    {_, I} = leaf(Key, T),
    L = maps:get(I, Ls, #{}),
    case L of
        #{Key := H} -> T;
        _ -> rehash(I, T#{leaves := Ls#{I => L#{Key => H}}})
    end.

%% @doc Remove a key (its object is gone).
-spec remove(term(), tree()) -> tree().
remove(Key, T = #{leaves := Ls}) ->
    {_, I} = leaf(Key, T),
    case Ls of
        #{I := L = #{Key := _}} ->
            L1 = maps:remove(Key, L),
            Ls1 = case map_size(L1) of 0 -> maps:remove(I, Ls); _ -> Ls#{I := L1} end,
            rehash(I, T#{leaves := Ls1});
        _ -> T
    end.

%% Recompute the leaf's hash and its ancestors'.
rehash(I, T = #{depth := D, leaves := Ls, inner := In}) ->
    LeafHash = case Ls of
                   #{I := L} -> hash(lists:sort(maps:to_list(L)));
                   _ -> ?EMPTY
               end,
    T#{inner := up(D, I, LeafHash, T, In)}.

up(Level, I, ?EMPTY, T, In) -> next_up(Level, I, T, maps:remove({Level, I}, In));
up(Level, I, H, T, In) -> next_up(Level, I, T, In#{{Level, I} => H}).

next_up(0, _, _, In) -> In;
next_up(Level, I, T = #{fanout := F}, In) ->
    P = I div F,
    Hs = [maps:get({Level, P * F + J}, In, ?EMPTY) || J <- lists:seq(0, F - 1)],
    H = case lists:all(fun(X) -> X =:= ?EMPTY end, Hs) of
            true -> ?EMPTY;
            false -> hash(Hs)
        end,
    up(Level - 1, P, H, T, In).

%% @doc The root hash (0 for an empty tree).
-spec root(tree()) -> non_neg_integer().
root(T) -> node_hash({0, 0}, T).

%% @doc The hash of a node (0 for an empty subtree).
-spec node_hash(tree_node(), tree()) -> non_neg_integer().
node_hash(N, #{inner := In}) -> maps:get(N, In, ?EMPTY).

%% @doc The sorted `{Key, Hash}' list of a leaf.
-spec leaf_list(tree_node(), tree()) -> [{term(), non_neg_integer()}].
leaf_list({_, I}, #{leaves := Ls}) -> lists:sort(maps:to_list(maps:get(I, Ls, #{}))).

%% @doc Every key in the tree.
-spec keys(tree()) -> [term()].
keys(#{leaves := Ls}) -> lists:sort(lists:append([maps:keys(L) || L <- maps:values(Ls)])).

%% @doc Metadata size: stored inner hashes plus key-hash pairs.
-spec size(tree()) -> non_neg_integer().
size(#{leaves := Ls, inner := In}) ->
    map_size(In) + lists:sum([map_size(L) || L <- maps:values(Ls)]).

%%% ================================================================ exchange

%% @doc The first message of an exchange: the root.
-spec start(tree()) -> msg().
start(T) -> {nodes, [{{0, 0}, root(T)}]}.

%% @doc One step of the exchange on the other side's message: the answer, the keys that
%% differ (from leaf lists), or `done' (the trees agree on everything the message covers).
-spec compare(msg(), tree()) -> {reply, msg()} | {keys, [term()]} | done.
compare({nodes, L}, T = #{depth := D, fanout := F}) ->
    case [N || {N, H} <- L, node_hash(N, T) =/= H] of
        [] -> done;
        Diff = [{D, _} | _] -> {reply, {leaves, [{N, leaf_list(N, T)} || N <- Diff]}};
        Diff ->
            {reply, {nodes, [{C, node_hash(C, T)}
                             || {Lv, I} <- Diff, J <- lists:seq(0, F - 1),
                                C <- [{Lv + 1, I * F + J}]]}}
    end;
compare({leaves, L}, T) ->
    Keys = lists:usort(
             lists:append(
               [begin
                    Mine = leaf_list(N, T),
                    [K || {K, _} <- (Theirs -- Mine) ++ (Mine -- Theirs)]
                end || {N, Theirs} <- L])),
    case Keys of
        [] -> done;
        _ -> {keys, Keys}
    end.

pow(_, 0) -> 1;
pow(B, E) -> B * pow(B, E - 1).
