%% @doc EUnit tests of the partitioned-table simulator ({@link hm_sim_frag}): a node that
%% dies for good and leaves the pool while it is down.
-module(hm_sim_frag_tests).
-include_lib("eunit/include/eunit.hrl").

%% The seeds whose schedules kill a node for good (1 seed of 4 of a table of records).
dead_node_seeds() -> [4, 8, 12, 16, 20, 24, 28, 32].

%% In each such seed one node dies, never restarts, and leaves the pool while it is down;
%% every checker passes: each fragment has its full number of copies again, ready, on nodes
%% that are up, all equal, and no acknowledged write is lost but those no other copy had
%% when the node died (counted as lost with the crash).
dead_node_leaves_the_pool_test_() ->
    {timeout, 120,
     [{lists:flatten(io_lib:format("seed ~p", [Seed])),
       ?_test(begin
                  {_, Trace} = hm_sim_frag:gen(Seed, #{}),
                  [Dead] = [Nd || {_, {die, Nd}} <- Trace],
                  ?assertEqual([Dead], [Nd || {_, {pool, del, Nd}} <- Trace]),
                  ?assertEqual([], [A || {_, A = {pool, add, _}} <- Trace]),
                  #{ok := Ok, failures := Fs, stats := St} = hm_sim_frag:run_seed(Seed, #{}),
                  ?assertEqual({true, []}, {Ok, Fs}),
                  ?assertMatch(#{dead_nodes := 1, dead_nodes_removed := 1}, St),
                  ?assert(maps:get(copies_of_dead_nodes_removed, St) > 0)
              end)}
      || Seed <- dead_node_seeds()]}.

%% The other seeds, and CRDT tables, have no dead node.
only_one_seed_in_four_of_a_table_of_records_has_a_dead_node_test() ->
    Dies = fun(Seed, Opts) ->
                   {_, Trace} = hm_sim_frag:gen(Seed, Opts),
                   [Nd || {_, {die, Nd}} <- Trace] =/= []
           end,
    ?assertEqual([Seed || Seed <- lists:seq(1, 40), Seed rem 4 =:= 0],
                 [Seed || Seed <- lists:seq(1, 40), Dies(Seed, #{})]),
    ?assertEqual([], [Seed || Seed <- lists:seq(1, 40), Dies(Seed, #{crdt => any})]),
    ?assertEqual([], [Seed || Seed <- lists:seq(1, 40), Dies(Seed, #{crash => false})]).
