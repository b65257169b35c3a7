%% @doc EUnit tests of the pure parts of {@link hm_partition}: when a leaving copy may go.
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
