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
