%% @doc EUnit entry points of the DottedDB group simulator ({@link hm_sim_dotted}): a few
%% hundred seeds (`HM_SIM_SEEDS' overrides the count, default 300) of one replica group under
%% DottedDB replication, node-clock or Merkle anti-entropy, with loss, duplication,
%% partitions, crashes and copies replaced by new node ids; every checker must pass.
-module(hm_sim_dotted_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case string:trim(os:getenv("HM_SIM_SEEDS", "")) of "" -> 300; V -> list_to_integer(V) end.

seeds_test_() ->
    {timeout, 300,
     ?_test(begin
                {P, F, Tot, Bad} = hm_sim_dotted:check_seeds({1, seeds()}, #{}),
                io:format(user, "~n~s", [hm_sim_dotted:summary_line(P, F, Tot)]),
                ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad]),
                %% the schedules did replace copies and remove deleted keys
                ?assert(maps:get(replaced, Tot, 0) > 0),
                ?assert(maps:get(removed, Tot, 0) > 0)
            end)}.

%% Merkle anti-entropy alone, on seeds of its own
merkle_test_() ->
    {timeout, 300,
     ?_test(begin
                {_, _, _, Bad} = hm_sim_dotted:check_seeds({10001, max(1, seeds() div 4)},
                                                           #{ae => merkle}),
                ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad])
            end)}.

%% the same seed gives the same run
deterministic_test() ->
    ?assertEqual(hm_sim_dotted:run_seed(7, #{}), hm_sim_dotted:run_seed(7, #{})).

%% a lossy run where nothing replicates on write: anti-entropy alone converges the group,
%% and every deleted key is physically gone
anti_entropy_only_test() ->
    R = hm_sim_dotted:run_seed(3, #{drop => 1.0, churn => 0, faults => 0}),
    ?assertEqual([], maps:get(failures, R)),
    ?assert(maps:get(removed, maps:get(stats, R), 0) > 0).

%% Known limit, not fixed: a copy's id is its node, with no incarnation, and the runtime's
%% copies keep their state in their process. A copy that restarts with nothing takes a ready
%% peer's state (or starts empty when it reaches none) and continues its dots after those
%% that peer has seen of it. A write of its previous life that reached some copies but not
%% that peer leaves a gap in its id's entry that no copy can fill: contexts naming it are
%% never stripped (and a dot of its previous life may be made again for another write).
%% Dotted seeds with `restart => empty' fail 21 of 1000 this way; this is seed 154,
%% minimised. The test fails once ids carry an incarnation (a restart then retires the old
%% id as a replaced copy's is): turn it into a regression test then.
known_limit_restart_without_state_test() ->
    Cfg = #{ae => merkle, delay => 80, drop => 0.17, dup => 0.04, duration => 4000,
            kind => dotted, n => 3, restart => empty, seed => 154, skew => #{}},
    Trace = [{2011, {partition, flap, [[n1], [n2, n3]]}}, {2205, {op, n1, k4, put}},
             {2358, heal}, {2700, {op, n3, k2, delete}},
             {2727, {partition, isolated, [[n2], [n1, n3]]}}, {2878, {op, n3, k1, put}},
             {2922, {op, n1, k1, put}}, {2996, {crash, n1}}, {3103, heal},
             {3140, {op, n2, k1, put}}],
    #{failures := Fs} = hm_sim_dotted:run(Cfg, Trace),
    ?assertMatch([_ | _], [F || {_, F} <- Fs, element(1, F) =:= clock_not_bounded]).
