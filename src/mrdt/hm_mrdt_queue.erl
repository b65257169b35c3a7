%% @doc A mergeable queue (after the mergeable replicated data types that "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types" builds on): the value is a
%% list, head first; a version changes a queue by taking elements from the front and adding
%% elements at the back, and a session writes the whole new list.
%%
%% Merge: an element taken by either version is gone (the longer of the two removed prefixes
%% of the LCA is dropped); the elements each version added are appended, the two groups in
%% term order of the groups (so the merge is commutative), each in its own order.
-module(hm_mrdt_queue).
-behaviour(hm_mrdt).

-export([merge/3, valid/1]).

%% @doc Merge two queues (see the module doc).
-spec merge([term()] | none, [term()], [term()]) -> {ok, [term()]}.
merge(none, A, B) -> merge([], A, B);
merge(L, L, B) -> {ok, B};
merge(L, A, L) -> {ok, A};
merge(L, A, B) ->
    {TA, NA} = split(L, A),
    {TB, NB} = split(L, B),
    Added = case NA =< NB of
                true -> NA ++ NB;
                false -> NB ++ NA
            end,
    {ok, lists:nthtail(max(TA, TB), L) ++ Added}.

%% {How many elements V took from the front of L, the elements V added at the back}: the
%% fewest taken such that the rest of L is a prefix of V.
split(L, V) -> split(L, V, 0).

split(L, V, N) ->
    case lists:prefix(L, V) of
        true -> {N, lists:nthtail(length(L), V)};
        false -> split(tl(L), V, N + 1)
    end.

%% @doc A queue is written as a list.
-spec valid(term()) -> boolean().
valid(V) -> is_list(V).
