%% @doc Dotted causal containers: a dot store paired with a causal context (Almeida, Shoker,
%% Baquero, "Delta state replicated data types", §6), with the DottedDB strip and fill against a
%% node clock (the DottedDB paper, §IV.C and Algorithm 2).
%%
%% A container is `{Store, Ctx}': `Ctx' ({@link hm_node_clock}) is every dot the replica has
%% seen; `Store' holds the dots that are still live, each with its payload. Two kinds of store:
%% <ul>
%% <li>dot fun: `#{Dot => Value}', a value per live dot (a dot set is a dot fun to `true');</li>
%% <li>dot map: `{dm, #{Key => Store}}', a nested store per key.</li>
%% </ul>
%% The join keeps a dot that both sides keep, or that one side keeps and the other has never
%% seen; a dot one side has seen and dropped stays dropped. Every state and delta CRDT type in
%% `src/crdt' is such a container, so they all share this one join.
%%
%% Invariants: a dot map never holds a key whose nested store is empty (so equal contents are
%% equal terms); every dot in `Store' is in `Ctx'.
%%
%% {@link join_delta/2} is the same join for a delta whose context only names dots of the keys
%% its store lists (the deltas our mutators produce): it visits only those keys, so applying a
%% delta costs the size of the delta, not of the state.
-module(hm_dcc).

-export([new/1, join/2, join_delta/2, join_deltas/2, store/1, context/1, dots/1, store_dots/1,
         is_empty_store/1, strip/2, fill/2, normalize/1]).
-export_type([dcc/0, store/0]).

-type dot() :: hm_vv:dot().
-type store() :: #{dot() => term()} | {dm, #{term() => store()}}.
-type dcc() :: {store(), hm_node_clock:clock()}.

%% @doc An empty container with the given empty store (`#{}' or `{dm, #{}}').
-spec new(store()) -> dcc().
new(Empty) -> {Empty, hm_node_clock:new()}.

-spec store(dcc()) -> store().
store({S, _}) -> S.

-spec context(dcc()) -> hm_node_clock:clock().
context({_, C}) -> C.

%% @doc Lattice join of two containers.
-spec join(dcc(), dcc()) -> dcc().
join({S1, C1}, {S2, C2}) ->
    {join_store(S1, C1, S2, C2, full), hm_node_clock:join(C1, C2)}.

%% @doc Join a delta into a state, visiting only the keys the delta's store lists.
-spec join_delta(dcc(), dcc()) -> dcc().
join_delta({S1, C1}, {S2, C2}) ->
    {join_store(S1, C1, S2, C2, delta), hm_node_clock:join(C1, C2)}.

%% @doc Join two deltas into one, a delta-interval (*Delta State Replicated Data Types*,
%% Definition 4): `join_delta(join_delta(X, D1), D2) = join_delta(X, join_deltas(D1, D2))'
%% for deltas whose contexts only name dots of the keys their stores list. Unlike
%% {@link join/2} it keeps every key either delta lists, with an empty store where nothing
%% live is left of it (a removal): {@link join_delta/2} visits only the keys a delta lists.
%% Visits only the keys `D2' lists, so folding many small deltas into one costs their size.
-spec join_deltas(dcc(), dcc()) -> dcc().
join_deltas({{dm, M1}, C1}, {{dm, M2}, C2}) ->
    M = maps:fold(fun(K, V2, Acc) ->
                          V1 = case M1 of
                                   #{K := A} -> A;
                                   _ -> bottom(V2)
                               end,
                          Acc#{K => join_store(V1, C1, V2, C2, full)}
                  end, M1, M2),
    {{dm, M}, hm_node_clock:join(C1, C2)};
join_deltas(D1, D2) -> join(D1, D2).

join_store({dm, M1}, C1, {dm, M2}, C2, Mode) ->
    Keys = case Mode of
               full -> maps:keys(maps:merge(M1, M2));
               delta -> maps:keys(M2)
           end,
    {dm, lists:foldl(
           fun(K, Acc) ->
                   {V1, V2} = case {M1, M2} of
                                  {#{K := A}, #{K := B}} -> {A, B};
                                  {#{K := A}, _} -> {A, bottom(A)};
                                  {_, #{K := B}} -> {bottom(B), B}
                              end,
                   J = join_store(V1, C1, V2, C2, full),
                   case is_empty_store(J) of
                       true -> maps:remove(K, Acc);
                       false -> Acc#{K => J}
                   end
           end, M1, Keys)};
join_store(F1, C1, F2, _C2, _Mode) when map_size(F1) =:= 0, is_map(F2) ->
    %% (a key new on one side, the common case of a delta: one filter instead of two)
    maps:filter(fun(D, _) -> not hm_node_clock:contains(D, C1) end, F2);
join_store(F1, C1, F2, C2, _Mode) when is_map(F1), is_map(F2) ->
    Keep1 = maps:filter(fun(D, _) -> maps:is_key(D, F2) orelse
                                         not hm_node_clock:contains(D, C2) end, F1),
    Keep2 = maps:filter(fun(D, _) -> not maps:is_key(D, F1) andalso
                                         not hm_node_clock:contains(D, C1) end, F2),
    maps:merge(Keep2, Keep1).

%% The empty store of the same kind.
bottom({dm, _}) -> {dm, #{}};
bottom(F) when is_map(F) -> #{}.

%% @doc Every live dot of the container's store.
-spec dots(dcc()) -> [dot()].
dots({S, _}) -> store_dots(S).

%% @doc Every dot in a store.
-spec store_dots(store()) -> [dot()].
store_dots({dm, M}) -> maps:fold(fun(_, S, Acc) -> store_dots(S) ++ Acc end, [], M);
store_dots(F) when is_map(F) -> maps:keys(F).

%% @doc No live dots.
-spec is_empty_store(store()) -> boolean().
is_empty_store({dm, M}) -> map_size(M) =:= 0;
is_empty_store(F) when is_map(F) -> map_size(F) =:= 0.

%% @doc Drop empty nested stores (a delta may list a key with an empty store to mark it
%% touched; as a lattice value that is bottom).
-spec normalize(dcc()) -> dcc().
normalize({S, C}) -> {normalize_store(S), C}.

normalize_store({dm, M}) ->
    {dm, maps:fold(fun(K, S, Acc) ->
                           N = normalize_store(S),
                           case is_empty_store(N) of
                               true -> Acc;
                               false -> Acc#{K => N}
                           end
                   end, #{}, M)};
normalize_store(F) -> F.

%% @doc DottedDB `strip': remove from the context what the node clock's contiguous bases
%% already say (the DottedDB paper, Algorithm 2). Live dots stay in the store.
-spec strip(dcc(), hm_node_clock:clock()) -> dcc().
strip({S, C}, NC) -> {S, hm_node_clock:strip_vv(C, NC)}.

%% @doc DottedDB `fill': restore the context from the node clock's bases. After
%% `fill(strip(X, NC), NC)' the context covers the original one.
-spec fill(dcc(), hm_node_clock:clock()) -> dcc().
fill({S, C}, NC) ->
    {S, hm_node_clock:join(C, hm_node_clock:from_vv(hm_node_clock:base(NC)))}.
