%% @doc Version vectors: a map from replica id to the number of events seen from it.
%%
%% A version vector `V' stands for the set of dots `{R, C}' with `1 =< C =< V[R]'; a missing
%% entry is 0. Version vectors form a join semilattice under pointwise maximum ({@link join/2}),
%% ordered by {@link leq/2}. They are the timestamps of the tagged causal broadcast
%% (the Hypermnesia paper, §4.4, Algorithm 1: the `delivered' map and message `deps') and the contiguous part
%% of a node clock (the DottedDB paper, §IV.B).
%%
%% Invariants: no entry holds 0 (absent means 0), so equal vectors are equal terms.
-module(hm_vv).

-export([new/0, get/2, increment/2, set/3, join/2, meet/2, leq/2, descends/2,
         concurrent/2, compare/2, contains/2, from_list/1, to_list/1, size/1, missing/2]).
-export_type([vv/0, replica/0, counter/0, dot/0]).

-type replica() :: term().
-type counter() :: pos_integer().
-type dot() :: {replica(), counter()}.
-type vv() :: #{replica() => counter()}.

%% @doc The empty version vector (nothing seen).
-spec new() -> vv().
new() -> #{}.

%% @doc Entry of `R', 0 when absent.
-spec get(replica(), vv()) -> non_neg_integer().
get(R, V) -> maps:get(R, V, 0).

%% @doc Count one more event of `R'.
-spec increment(replica(), vv()) -> vv().
increment(R, V) -> V#{R => get(R, V) + 1}.

%% @doc Set the entry of `R' (0 removes it).
-spec set(replica(), non_neg_integer(), vv()) -> vv().
set(R, 0, V) -> maps:remove(R, V);
set(R, N, V) when is_integer(N), N > 0 -> V#{R => N}.

%% @doc Least upper bound: pointwise maximum.
-spec join(vv(), vv()) -> vv().
join(A, B) when map_size(A) < map_size(B) -> join(B, A);
join(A, B) ->
    maps:fold(fun(R, N, Acc) ->
                      case Acc of
                          #{R := M} when M >= N -> Acc;
                          _ -> Acc#{R => N}
                      end
              end, A, B).

%% @doc Greatest lower bound: pointwise minimum (what every vector has seen).
-spec meet(vv(), vv()) -> vv().
meet(A, B) ->
    maps:fold(fun(R, N, Acc) ->
                      case B of
                          #{R := M} -> Acc#{R => min(N, M)};
                          _ -> Acc
                      end
              end, #{}, A).

%% @doc `A =< B' pointwise: everything `A' saw, `B' saw.
-spec leq(vv(), vv()) -> boolean().
leq(A, B) ->
    maps:fold(fun(_, _, false) -> false;
                 (R, N, true) -> N =< get(R, B)
              end, true, A).

%% @doc `A' has seen everything `B' has (`B =< A').
-spec descends(vv(), vv()) -> boolean().
descends(A, B) -> leq(B, A).

%% @doc Neither descends from the other.
-spec concurrent(vv(), vv()) -> boolean().
concurrent(A, B) -> not leq(A, B) andalso not leq(B, A).

%% @doc Causal order of two vectors.
-spec compare(vv(), vv()) -> equal | before | 'after' | concurrent.
compare(A, B) ->
    case {leq(A, B), leq(B, A)} of
        {true, true} -> equal;
        {true, false} -> before;
        {false, true} -> 'after';
        {false, false} -> concurrent
    end.

%% @doc Whether the dot is among the events the vector has seen.
-spec contains(dot(), vv()) -> boolean().
contains({R, C}, V) -> C =< get(R, V).

%% @doc Build from `[{Replica, Counter}]'; zero entries are dropped, duplicates joined.
-spec from_list([{replica(), non_neg_integer()}]) -> vv().
from_list(L) ->
    lists:foldl(fun({_, 0}, Acc) -> Acc;
                   ({R, N}, Acc) when is_integer(N), N > 0 -> join(Acc, #{R => N})
                end, #{}, L).

%% @doc Sorted `[{Replica, Counter}]'.
-spec to_list(vv()) -> [{replica(), counter()}].
to_list(V) -> lists:sort(maps:to_list(V)).

%% @doc Number of non-zero entries.
-spec size(vv()) -> non_neg_integer().
size(V) -> map_size(V).

%% @doc How many of the events `V1' has seen `V2' has not.
-spec missing(vv(), vv()) -> non_neg_integer().
missing(V1, V2) -> maps:fold(fun(R, C, N) -> N + max(0, C - get(R, V2)) end, 0, V1).
