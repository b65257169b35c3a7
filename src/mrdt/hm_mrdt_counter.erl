%% @doc A mergeable counter (after "Banyan: Coordination-free Distributed Transactions over
%% Mergeable Types", section 4.3): an integer; `merge(LCA, A, B) = A + B - LCA', a missing LCA
%% counting as 0. A session increments a counter by reading it and writing the new value; the
%% merge keeps every increment made on either side since the LCA.
-module(hm_mrdt_counter).
-behaviour(hm_mrdt).

-export([merge/3, valid/1]).

%% @doc `A + B - LCA'.
-spec merge(integer() | none, integer(), integer()) -> {ok, integer()}.
merge(none, A, B) -> {ok, A + B};
merge(LCA, A, B) -> {ok, A + B - LCA}.

%% @doc A counter holds an integer.
-spec valid(term()) -> boolean().
valid(V) -> is_integer(V).
