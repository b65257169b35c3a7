%% @doc EUnit entry points of the session simulator ({@link hm_sim_mrdt}): a few seeds with
%% every fault (partitions, crashes, per-key delivery in causal order, history collection,
%% compactions) must pass every checker (`HM_SIM_MRDT_SEEDS' sets how many, default 30), and the final
%% checkers must reject a wrong result.
-module(hm_sim_mrdt_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case os:getenv("HM_SIM_MRDT_SEEDS") of
        V when V =:= false; V =:= "" -> 30;
        V -> list_to_integer(V)
    end.

seeds_test_() ->
    {timeout, 120,
     ?_test(begin
                {P, F, Stats, Bad} = hm_sim_mrdt:check_seeds({1, seeds()}),
                io:format(user, "~nsim sessions: ~p passed, ~p failed ~p~n", [P, F, Stats]),
                ?assertEqual([], Bad),
                %% the schedules did exercise what the checkers are about
                ?assert(maps:get(deleted, Stats) > 0),
                ?assert(maps:get(crashes, Stats) > 0),
                ?assert(maps:get(merges, Stats) > 0),
                ?assert(maps:get(compactions, Stats) > 0)
            end)}.

checkers_reject_wrong_results_test() ->
    S = hm_sim_mrdt:final_state(7),
    ?assertEqual(ok, hm_sim_mrdt:check_end(S)),
    #{published := P, elems := Es} = S,
    ?assertThrow({check, {lost_increments, _, _, _}}, hm_sim_mrdt:check_end(S#{published := P + 1})),
    ?assertThrow({check, {lost_elements, _, _}}, hm_sim_mrdt:check_end(S#{elems := [-1 | Es]})),
    #{entries := Ls, copy := C} = S,
    ?assertThrow({check, {lost_entries, _, _, _}}, hm_sim_mrdt:check_end(S#{entries := [-1 | Ls]})),
    %% a log value nothing reaches, left in a copy: storage not bounded by what is live
    [N | _] = lists:sort(maps:keys(C)),
    Stale = {entry, stale, nil},
    C1 = C#{N := (maps:get(N, C))#{{obj, hm_mrdt:hash(Stale)} => Stale}},
    ?assertThrow({check, {objects_not_collected, N, 1}}, hm_sim_mrdt:check_end(S#{copy := C1})).
