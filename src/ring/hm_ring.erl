%% @doc Consistent-hash placement of a partitioned table's fragments, pure ("RELEASE:
%% Scalable persistent storage for Erlang", "The requirements for scalable and available
%% persistent storage": implicit placement by consistent hashing, peer to peer, with no
%% central directory; the preference lists of "Dynamo: Amazon's Highly Available Key-value
%% Store", §4.2–4.3).
%%
%% A ring is the 32-bit hash space with every pool node at `vnodes' points (each point is
%% the hash of `{Node, I}'). A table has a fixed number `F' of fragments; fragment `K' sits
%% at the point `(K - 1) * 2^32 div F' and is held by the first `N' distinct nodes met
%% walking the ring clockwise from there: its preference list. A key belongs to fragment
%% `erlang:phash2(Key, F) + 1', for ever: nodes joining or leaving move fragments between
%% nodes, never keys between fragments.
%%
%% Invariants (checked by the properties in hm_ring_prop):
%% <ul>
%% <li>the preference list of a fragment holds `min(N, nodes)' distinct pool nodes, and
%% depends only on the pool as a set (every node computes the same one);</li>
%% <li>a node joining enters some preference lists and changes nothing else: each list it
%% enters keeps the others in the same order, minus at most its last one; a node leaving
%% is the exact reverse. So about `N/n' of the copies move, never more.</li>
%% </ul>
-module(hm_ring).

-export([new/1, new/2, preference_list/3, placement/3, moves/2]).
-export_type([ring/0, placement/0, move/0]).

-define(RANGE, (1 bsl 32)).
-define(VNODES, 64).

-opaque ring() :: {ring, [node()], tuple()}.    % {ring, Pool, {{Point, Node}, ...} sorted}
-type placement() :: #{pos_integer() => [node()]}.
-type move() :: {pos_integer(), Add :: [node()], Remove :: [node()]}.

%% @doc The ring of a pool of nodes, with 64 points per node.
-spec new([node()]) -> ring().
new(Pool) -> new(Pool, ?VNODES).

%% @doc The ring of a pool, with `VNodes' points per node.
-spec new([node()], pos_integer()) -> ring().
new(Pool, VNodes) when is_list(Pool), is_integer(VNodes), VNodes > 0 ->
    Nodes = lists:usort(Pool),
    Points = lists:sort([{erlang:phash2({N, I}, ?RANGE), N}
                         || N <- Nodes, I <- lists:seq(1, VNodes)]),
    {ring, Nodes, list_to_tuple(Points)}.

%% @doc The preference list of fragment `K' of `F': its `N' owners, in ring order (the first
%% is the fragment's coordinator of choice).
-spec preference_list(ring(), {pos_integer(), pos_integer()}, pos_integer()) -> [node()].
preference_list({ring, Nodes, Points}, {K, F}, N)
  when is_integer(K), is_integer(F), K >= 1, K =< F, is_integer(N), N >= 1 ->
    Want = min(N, length(Nodes)),
    case tuple_size(Points) of
        0 -> [];
        Size -> walk(first_at(Points, (K - 1) * (?RANGE div F)), Points, Size, Want, [])
    end.

%% @doc Owners of every fragment of `F', `N' each.
-spec placement(ring(), pos_integer(), pos_integer()) -> placement().
placement(Ring, F, N) ->
    maps:from_list([{K, preference_list(Ring, {K, F}, N)} || K <- lists:seq(1, F)]).

%% @doc What changes from one placement to another, per fragment that changes: the nodes
%% that get a copy and those that lose theirs.
-spec moves(placement(), placement()) -> [move()].
moves(Old, New) ->
    lists:sort([{K, NewOwners -- OldOwners, OldOwners -- NewOwners}
                || {K, NewOwners} <- maps:to_list(New),
                   OldOwners <- [maps:get(K, Old, [])],
                   lists:sort(NewOwners) =/= lists:sort(OldOwners)]).

%%% ---------------------------------------------------------------- internal

%% Index (1-based) of the first point at or after `At', wrapping to 1.
first_at(Points, At) -> first_at(Points, At, 1, tuple_size(Points)).

first_at(Points, At, Lo, Hi) when Lo < Hi ->
    Mid = (Lo + Hi) div 2,
    case element(1, element(Mid, Points)) < At of
        true -> first_at(Points, At, Mid + 1, Hi);
        false -> first_at(Points, At, Lo, Mid)
    end;
first_at(Points, At, Lo, _) ->
    case element(1, element(Lo, Points)) >= At of
        true -> Lo;
        false -> 1
    end.

walk(_I, _Points, _Size, 0, Acc) -> lists:reverse(Acc);
walk(I, Points, Size, Want, Acc) ->
    {_, Node} = element(I, Points),
    Next = I rem Size + 1,
    case lists:member(Node, Acc) of
        true -> walk(Next, Points, Size, Want, Acc);
        false -> walk(Next, Points, Size, Want - 1, [Node | Acc])
    end.
