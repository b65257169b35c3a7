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

%% The copies of a group just created are ready soon, so a get with r = 3 right after a
%% table is created has its answers. They start one after another, each later one taking a
%% handoff from a ready copy first. A copy asked while it is itself waiting for its handoff
%% refuses; refused in silence, the asking copy would ask again only 2, then 4, 8, 16
%% anti-entropy ticks later, and a copy could stay syncing, refusing reads and writes, for
%% seconds. With no faults, every copy is ready within four anti-entropy intervals (250 ms;
%% messages take at most 150 ms): an ask, a refusal, an ask of another copy, the handoff.
created_group_ready_soon_test_() ->
    {timeout, 120,
     ?_test(begin
                Late = [{Seed, Ms}
                        || Seed <- lists:seq(1, 60),
                           #{ok := true, stats := St} <-
                               [hm_sim_dotted:run_seed(Seed, #{start => created, faults => 0,
                                                               churn => 0, drop => 0.0,
                                                               dup => 0.0, ops => 10})],
                           Ms <- [maps:get(ready_ms, St, none)],
                           Ms =:= none orelse Ms > 1000],
                ?assertEqual([], Late)
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

%% Copies that restart without their state (the runtime's copies keep it in their process),
%% on seeds of their own: each start is a new incarnation of the node's copy.
restart_without_state_test_() ->
    {timeout, 300,
     ?_test(begin
                {_, _, Tot, Bad} = hm_sim_dotted:check_seeds({20001, seeds()},
                                                             #{restart => empty}),
                ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad]),
                ?assert(maps:get(restarts, Tot, 0) > 0)
            end)}.

%% A copy that restarts without its state takes a new id: ids carry an incarnation, and a
%% restart retires the old one as a replaced copy's (seed 154 under `restart => empty',
%% minimised). With the node as its id, a copy that restarted with nothing would continue
%% its dots after those the peer it took its state from had seen of it: a write of its
%% previous life that reached another copy but not that peer would leave a gap in its id's
%% entry no copy can fill (contexts naming it never stripped), and the same dot could be
%% made again for another write.
restart_without_state_takes_a_new_id_test() ->
    Cfg = #{ae => merkle, delay => 80, drop => 0.17, dup => 0.04, duration => 4000,
            kind => dotted, n => 3, restart => empty, seed => 154, skew => #{}},
    Trace = [{2011, {partition, flap, [[n1], [n2, n3]]}}, {2205, {op, n1, k4, put}},
             {2358, heal}, {2700, {op, n3, k2, delete}},
             {2727, {partition, isolated, [[n2], [n1, n3]]}}, {2878, {op, n3, k1, put}},
             {2922, {op, n1, k1, put}}, {2996, {crash, n1}}, {3103, heal},
             {3140, {op, n2, k1, put}}],
    ?assertMatch(#{failures := []}, hm_sim_dotted:run(Cfg, Trace)).

%% A repair names every dot of a closed id up to the highest the sender holds, gaps no copy
%% can fill included (seed 1995, minimised): a copy is replaced while another copy holds a
%% version of it, superseded elsewhere, with a gap below it (a write of it that reached
%% nobody). Once the retired id is closed, contexts drop its entry; without those dots the
%% copy holding the stale version would never learn it is superseded.
repair_names_a_closed_ids_dots_across_gaps_test() ->
    {Cfg, _} = hm_sim_dotted:gen(1995, #{}),
    Trace = [{371, {op, n3, k4, put}}, {421, {op, n1, k1, put}}, {493, {op, n2, k3, delete}},
             {662, {partition, halves, [[n3], [n1, n2]]}}, {746, {op, n1, k4, put}},
             {778, {op, n1, k4, delete}}, {1145, {op, n1, k2, put}},
             {1148, {op, n1, k1, put}}, {1539, {crash, n1}},
             {1603, {partition, flap, [[n3], [n1, n2]]}},
             {2043, {partition, flap, [[n3], [n1, n2]]}}, {2236, {op, n2, k3, put}},
             {2364, {replace, 1}}, {2390, heal}, {2528, {op, n2, k1, delete}},
             {2853, {op, n3, k1, put}}, {3013, {op, n3, k1, put}},
             {3124, {op, n3, k1, delete}}, {3166, {op, n3, k2, put}}],
    ?assertMatch(#{failures := []}, hm_sim_dotted:run(Cfg, Trace)).
