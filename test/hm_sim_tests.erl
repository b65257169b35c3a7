%% @doc EUnit entry points of the deterministic simulator ({@link hm_sim}, seed 000 §4.4–4.8,
%% issues X6/X7).
%%
%% <ul>
%% <li>`seeds_test_': 300 seeds (`HM_SIM_SEEDS' overrides) in the regimes the cores currently
%% pass: every fault (drops, duplicates, reordering, delays, the four partition shapes) with
%% no `clear' and no crash; and crashes/restarts of disc replicas with no `clear'. All must
%% pass every checker.</li>
%% <li>`known_bug_*_test': hand-minimised schedules of the bugs the simulator found in the
%% cores (see sim/REPORT.md). Each asserts that the bug STILL shows, with the checker that
%% catches it (A to F in sim/REPORT.md); when a fix lands the test fails: move the regime into `seeds_test_'.</li>
%% </ul>
-module(hm_sim_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case os:getenv("HM_SIM_SEEDS") of
        V when V =:= false; V =:= "" -> 300;
        V -> list_to_integer(V)
    end.

regime(Name, From, Count, Opts) ->
    {Name, {timeout, 120,
            ?_test(begin
                       {P, F, Tot, Bad} = hm_sim:check_seeds({From, Count}, Opts),
                       io:format(user, "~nsim ~s: ~p passed, ~p failed (~p ops, ~p messages, "
                                 "~p dropped, ~p duplicated, ~p crashes)~n",
                                 [Name, P, F, maps:get(ops, Tot, 0), maps:get(msgs, Tot, 0),
                                  maps:get(dropped, Tot, 0), maps:get(duplicated, Tot, 0),
                                  maps:get(crashes, Tot, 0)]),
                       ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad])
                   end)}}.

seeds_test_() ->
    N = seeds(),
    [regime("network faults and partitions, no crash, no clear", 1, N - N div 3,
            #{clear => false, crash => false}),
     regime("disc crashes and restarts, no clear", 100001, N div 3,
            #{clear => false, storage => disc})].

%% the same seed gives the same run (the scheduler has no hidden state)
deterministic_test() ->
    R1 = hm_sim:run_seed(42, #{}),
    R2 = hm_sim:run_seed(42, #{}),
    ?assertEqual(R1, R2).

cfg(N, Type, Policy, Storage) ->
    #{n => N, type => Type, policy => Policy, storage => Storage, drop => 0.0, dup => 0.0,
      delay => 10, duration => 4000, seed => 1, keys => [k1],
      skew => maps:from_list([{list_to_atom("n" ++ integer_to_list(I)), 0}
                              || I <- lists:seq(1, N)])}.

kinds(#{failures := Fs}) -> lists:usort([element(1, W) || {_, W} <- Fs]).

%% A: prwset clear. n1 clears (k1 absent there), then writes k1; n2 writes k1 concurrently.
%% hm_ec_server re-applies the unstable clear's delete to every concurrent operation that
%% arrives later, even on a key where an operation that follows the clear already pruned
%% that delete: n1 ends with k1 absent, n2 shows it (as hm_ec_key's semantics say: the
%% delete is superseded by n1's write).
known_bug_prwset_clear_test() ->
    Trace = [{100, {partition, halves, [[n1], [n2]]}},
             {200, {op, n1, k1, clear}},
             {300, {op, n1, k1, {write, b}}},
             {400, {op, n2, k1, {write, b}}}],
    R = hm_sim:run(cfg(2, prwset, siblings, ram), Trace),
    ?assert(lists:member(diverged, kinds(R))).

%% B: a ram replica restarts (new incarnation) and installs a snapshot from a member that
%% lags; the others still count the old incarnation's acks (hm_tcsb `known' is per node), so
%% the write it lacks becomes "stable", is gc'd, and never reaches it.
known_bug_stale_known_after_restart_test() ->
    Trace = [{100, {partition, isolated, [[n3], [n1, n2]]}},
             {200, {op, n1, k1, {write, b}}},
             {1000, {crash, n2}},
             {1100, {partition, isolated, [[n1], [n2, n3]]}},
             {1200, {restart, n2}}],
    R = hm_sim:run(cfg(3, pawset, siblings, ram), Trace),
    ?assertMatch([{_, {unsafe_stability, n1, {not_delivered_by, [{{{n1, 1}, 1}, n2}]}}} | _],
                 maps:get(failures, R)).

%% C: an operation of a ram replica is lost with its crash, but a later operation of the same
%% incarnation reached a member: the causal buffer keeps it, undeliverable, forever (seed 265,
%% ram, no clear: 4 messages pending at n1 after quiescence).
known_bug_pending_forever_test() ->
    R = hm_sim:run_seed(265, #{clear => false, storage => ram}),
    ?assertMatch([{_, {log_not_empty, n1, {0, P}}}] when P > 0, maps:get(failures, R)).

%% D: a write reaches a restarted ram replica only through a snapshot; its origin crashes.
%% A snapshot carries rows, metadata and the delivered vector but not the unstable log, so
%% nothing ever retransmits the write to the third member.
known_bug_snapshot_without_log_test() ->
    Trace = [{100, {crash, n2}},
             {200, {partition, isolated, [[n3], [n1, n2]]}},
             {300, {op, n1, k1, {write, b}}},
             {400, {restart, n2}},
             {1000, {crash, n1}}],
    R = hm_sim:run(cfg(3, pawset, siblings, ram), Trace),
    ?assert(lists:member(diverged, kinds(R))).

%% E: a prwset clear is kept in hm_ec_server's `clears' until stable, to beat concurrent writes
%% that arrive later on keys not there yet; `clears' is not persisted, so after a disc replica
%% restarts a concurrent write survives at the clear's origin (n1 shows k1) while the other
%% replica applied the clear to it (k1 absent). Without the crash this schedule passes.
known_bug_disc_clears_not_durable_test() ->
    Trace = [{100, {partition, halves, [[n1], [n2]]}},
             {300, {op, n1, k1, clear}},
             {400, {crash, n1}},
             {500, {restart, n1}},
             {600, {op, n2, k1, {write, b}}}],
    R = hm_sim:run(cfg(2, prwset, siblings, disc), Trace),
    ?assertMatch([{_, {diverged, _, [{_, #{k1 := [{r, k1, b}]}}, {_, #{}}]}}],
                 maps:get(failures, R)),
    ?assertEqual([], maps:get(failures, hm_sim:run(cfg(2, prwset, siblings, disc),
                                                   Trace -- [{400, {crash, n1}},
                                                             {500, {restart, n1}}]))).

%% F: two ram replicas restart while the only member with state (n3) is cut off; each is
%% syncing and holds nothing, so each answers the other's snapshot request with the empty
%% snapshot meant for a brand-new table, and both become ready and empty. The write was
%% stable and gc'd before, so after the heal nothing repairs them: n3 shows k1, n1 and n2 never.
known_bug_empty_snapshot_release_test() ->
    Trace = [{100, {op, n1, k1, {write, b}}},
             {1100, {partition, isolated, [[n3], [n1, n2]]}},
             {1200, {crash, n1}}, {1200, {crash, n2}},
             {1300, {restart, n1}}, {1300, {restart, n2}}],
    R = hm_sim:run(cfg(3, pawset, siblings, ram), Trace),
    ?assertEqual([acknowledged_op_lost, diverged], kinds(R)).
