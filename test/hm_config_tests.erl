%% @doc EUnit tests of {@link hm_config}: parsing a cluster configuration and the table
%% options it gives.
-module(hm_config_tests).
-include_lib("eunit/include/eunit.hrl").

parse_defaults_test() ->
    {ok, C} = hm_config:parse([{nodes, [a@h, b@h]}, {crdt_tables, [{t, awset}]}]),
    ?assertEqual(#{nodes => [a@h, b@h], fragments => 1, replication => all,
                   storage => ram_copies, flavor => op, epoch => 100,
                   crdt_tables => [{t, awset}]}, C),
    ?assertEqual([{crdt, awset}, {flavor, op}, {epoch, 100}, {ram_copies, [a@h, b@h]}],
                 hm_config:table_options(awset, C)).

partitioned_test() ->
    {ok, C} = hm_config:parse([{nodes, [a@h, b@h, c@h]}, {fragments, 8}, {replication, 2},
                               {storage, disc_copies}, {flavor, delta}, {epoch, 50}]),
    ?assertEqual([{crdt, gcounter}, {flavor, delta}, {epoch, 50},
                  {frag_properties, [{n_fragments, 8}, {n_disc_copies, 2},
                                     {node_pool, [a@h, b@h, c@h]}]}],
                 hm_config:table_options(gcounter, C)).

bad_configs_test_() ->
    Ns = {nodes, [a@h]},
    [?_assertEqual({error, {bad_config, Bad}}, hm_config:parse([Ns, Bad]))
     || Bad <- [{fragments, 0}, {replication, x}, {storage, disc_only_copies},
                {flavor, crdt}, {epoch, 0}, {crdt_tables, [{t, nope}]}, {workers, 4}, oops]]
        ++ [?_assertEqual({error, {bad_config, missing_nodes}}, hm_config:parse([])),
            ?_assertEqual({error, {bad_config, {replication, 2}}},
                          hm_config:parse([Ns, {replication, 2}])),
            ?_assertEqual({error, {bad_config, x}}, hm_config:parse(x)),
            ?_assertMatch({error, {config, "/nonexistent/hm.config", enoent}},
                          hm_config:start("/nonexistent/hm.config"))].
