%% @doc A mergeable set (after "Banyan: Coordination-free Distributed Transactions over
%% Mergeable Types", section 2.1, and the mergeable replicated data types it builds on): the
%% value is an ordset (a write of any list stores it sorted, without duplicates). Three-way
%% merge: an element of the LCA stays only if both versions kept it (a removal on either side
%% wins); an element not in the LCA is present if either version added it.
-module(hm_mrdt_set).
-behaviour(hm_mrdt).

-export([merge/3, update/2, valid/1]).

%% @doc `(A ∩ B) ∪ (A \ LCA) ∪ (B \ LCA)'.
-spec merge(ordsets:ordset(term()) | none, ordsets:ordset(term()), ordsets:ordset(term())) ->
          {ok, ordsets:ordset(term())}.
merge(none, A, B) -> merge([], A, B);
merge(LCA, A, B) ->
    Kept = ordsets:intersection(A, B),
    {ok, ordsets:union([Kept, ordsets:subtract(A, LCA), ordsets:subtract(B, LCA)])}.

%% @doc A write stores the list as an ordset.
-spec update(term(), list()) -> ordsets:ordset(term()).
update(_Old, List) -> ordsets:from_list(List).

%% @doc A set is written as a list.
-spec valid(term()) -> boolean().
valid(V) -> is_list(V).
