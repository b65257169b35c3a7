%% @doc EUnit tests of the pure parts of {@link hm_partition}: when a leaving copy may go,
%% and the plan of a fragment's move ({@link hm_frag_move}).
-module(hm_partition_tests).
-include_lib("eunit/include/eunit.hrl").

%% The other holders must have what the leaving copy held when its removal began (a crashed
%% holder's operations may live on it alone) and what it originates until it goes, not what
%% it received from copies that stay.
removal_target_test() ->
    Held = #{{n1, 1} => 5, {n2, 1} => 7, {n3, 4} => 2},
    Mine = #{{n1, 1} => 9, {n2, 1} => 12, {n3, 4} => 2, {n3, 5} => 3},
    Target = hm_partition:removal_target(n1, Held, Mine),
    ?assertEqual(#{{n1, 1} => 9, {n2, 1} => 7, {n3, 4} => 2}, Target),
    %% held since the start, behind on another origin: not removable yet
    ?assertNot(hm_partition:caught_up(n1, Target, [#{{n1, 1} => 9, {n2, 1} => 6,
                                                      {n3, 4} => 2}])),
    ?assert(hm_partition:caught_up(n1, Target, [#{{n1, 1} => 9, {n2, 1} => 7, {n3, 4} => 2}])).

%% A holder that leaves while it is down is dropped first, without handing anything over;
%% one that is up hands over before it goes; the new copy is added between the two.
a_down_holder_is_dropped_without_handing_over_test() ->
    Up = fun(N) -> N =/= n2 end,
    ?assertEqual(#{drop => [n2], add => [n4], hand_over => [n3]},
                 hm_frag_move:plan([n1, n2, n3], {1, [n4], [n2, n3]}, Up)).

%% Whatever is up or down, a plan never hands over from a node that is down, never adds a
%% copy where one is, drops or hands over only copies that exist and that the ring removes,
%% and puts each node in one list at most.
a_plan_never_hands_over_from_a_down_node_test() ->
    Nodes = [n1, n2, n3, n4, n5],
    Subsets = fun(L) -> lists:foldr(fun(X, Acc) -> Acc ++ [[X | S] || S <- Acc] end, [[]], L) end,
    Cases = [{Hs, Add, Remove, DownSet}
             || Hs <- Subsets(Nodes), Hs =/= [],
                Remove <- Subsets(Hs),
                Add <- Subsets(Nodes -- Remove),
                DownSet <- Subsets(Remove ++ [n5])],
    ?assert(length(Cases) > 1000),
    lists:foreach(
      fun({Hs, Add, Remove, DownSet}) ->
              IsUp = fun(N) -> not lists:member(N, DownSet) end,
              #{drop := Drop, add := New, hand_over := Leave} =
                  hm_frag_move:plan(Hs, {7, Add, Remove}, IsUp),
              ?assertEqual([], [N || N <- Leave, not IsUp(N)]),
              ?assertEqual([], [N || N <- Drop, IsUp(N)]),
              ?assertEqual(lists:sort(Remove), lists:sort(Drop ++ Leave)),
              ?assertEqual(Add -- Hs, New),
              All = Drop ++ New ++ Leave,
              ?assertEqual(length(All), length(lists:usort(All)))
      end, Cases).

%% A change that was interrupted and is made again does not add a copy twice, and a node
%% the ring removes that no longer holds a copy has nothing to drop or hand over.
an_interrupted_move_is_not_done_twice_test() ->
    ?assertEqual(#{drop => [], add => [], hand_over => [n1]},
                 hm_frag_move:plan([n1, n4], {2, [n4], [n1]}, fun(_) -> true end)),
    ?assertEqual(#{drop => [], add => [], hand_over => []},
                 hm_frag_move:plan([n4], {2, [n4], [n1]}, fun(_) -> false end)).
