%% @doc EUnit entry points of the simulator's long-partition family ({@link hm_sim_long}):
%% one copy cut off for most of a run under steady load, with a bound on the log.
%%
%% <ul>
%% <li>`seeds_test_': 40 seeds (`HM_SIM_SEEDS' / 5 overrides) pass every checker of the
%% simulator, and the copies' logs and metadata stay within the bounds while the cut
%% lasts.</li>
%% <li>The simulator's own schedules of every fault (drops, duplicates, the four partition
%% shapes, crashes and restarts, copies added and removed) and of full load with crashes,
%% on `ram_copies' with a bound of a few operations: every checker passes though nearly
%% every operation leaves the log before it is stable.</li>
%% <li>With states in parts of one key, the same: every state a copy catches up with goes
%% in parts, and some are cut off in the middle.</li>
%% <li>Without the bound, the same schedules keep every operation for the copy cut off:
%% the check of the log fails (it can fail).</li>
%% </ul>
-module(hm_sim_long_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case os:getenv("HM_SIM_SEEDS") of
        V when V =:= false; V =:= "" -> 40;
        V -> max(1, list_to_integer(V) div 5)
    end.

log_and_metadata_stay_bounded_through_a_long_cut_test_() ->
    {timeout, 300,
     ?_test(begin
                N = seeds(),
                {P, F, Bad} = hm_sim_long:check_seeds(1, N),
                io:format(user, "~nsim long partition: ~p passed, ~p failed~n", [P, F]),
                ?assertEqual([], Bad),
                ?assertEqual(N, P)
            end)}.

a_tiny_bound_keeps_every_guarantee_test_() ->
    N = seeds(),
    [{Name, {timeout, 300,
             ?_test(begin
                        {P, F, _, Bad} = hm_sim:check_seeds({From, N}, Opts),
                        io:format(user, "~nsim ~s: ~p passed, ~p failed~n", [Name, P, F]),
                        ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad])
                    end)}}
     || {Name, From, Opts} <-
            [{"every fault, copies added and removed, a bound of 5 operations", 200001,
              #{membership => true, storage => ram, log_limit => 5, catch_up => 1000000}},
             {"full load with crashes, a bound of 50 operations", 1,
              #{load => true, faults => 8, storage => ram, log_limit => 50,
                catch_up => 1000000}},
             {"every fault, a bound of 5 operations, states in parts of one key", 300001,
              #{storage => ram, log_limit => 5, catch_up => 1000000, part_keys => 1}}]].

%% The runs above do send states in parts, cut off in the middle too: the path is taken.
states_go_in_parts_test_() ->
    {timeout, 120,
     ?_test(begin
                Parts = [maps:get({msg, merge_part}, St, 0)
                         || Seed <- lists:seq(1, 12),
                            #{stats := St} <- [hm_sim_long:run_seed(Seed)]],
                ?assert(length([P || P <- Parts, P > 0]) >= 2)
            end)}.

without_the_bound_the_log_grows_with_the_cut_test_() ->
    {timeout, 60,
     ?_test(begin
                #{ok := Ok, failures := Fs} = hm_sim_long:run_seed(1, #{log_limit => infinity}),
                ?assertNot(Ok),
                ?assertMatch([{bound, [{log, _, _, _, _} | _]}], Fs)
            end)}.
