%% @doc The options of an EC table (hm_ec_registry:ec_type/1 and ec_spec/1, pure): the EC type
%% as `{ec, pawset | prwset}' or the older `{type, pawset | prwset}', Mnesia's own `type'
%% beside it, and what is refused; and the keys an ordered_set EC table takes
%% (hm_ec_access:is_exact_key/1).
-module(hm_ec_registry_tests).
-include_lib("eunit/include/eunit.hrl").

ec_option_names_the_ec_type_test() ->
    ?assertEqual(pawset, hm_ec_registry:ec_type([{ec, pawset}, {attributes, [k, v]}])),
    ?assertEqual(prwset, hm_ec_registry:ec_type([{ram_copies, [n]}, {ec, prwset}])).

older_type_option_still_names_the_ec_type_test() ->
    ?assertEqual(pawset, hm_ec_registry:ec_type([{type, pawset}])),
    ?assertEqual(prwset, hm_ec_registry:ec_type([{type, prwset}, {ram_copies, [n]}])).

mnesia_types_alone_are_plain_tables_test() ->
    [?assertEqual(none, hm_ec_registry:ec_type(Opts))
     || Opts <- [[], [{type, set}], [{type, ordered_set}], [{type, bag}], [{attributes, [a, b]}]]].

unknown_or_repeated_ec_option_is_refused_test() ->
    ?assertEqual({error, {ec, lww}}, hm_ec_registry:ec_type([{ec, lww}])),
    ?assertEqual({error, {ec, prwset}}, hm_ec_registry:ec_type([{ec, pawset}, {ec, prwset}])),
    ?assertEqual({error, {ec, lww}}, hm_ec_registry:ec_spec([{ec, lww}])).

mnesia_type_beside_the_ec_type_test() ->
    Cases = [{[{ec, pawset}], {ok, pawset, set}},
             {[{ec, pawset}, {type, set}], {ok, pawset, set}},
             {[{ec, prwset}, {type, ordered_set}], {ok, prwset, ordered_set}},
             {[{type, ordered_set}, {ec, pawset}], {ok, pawset, ordered_set}},
             {[{type, pawset}], {ok, pawset, set}},
             {[{ec, pawset}, {type, pawset}], {ok, pawset, set}},
             {[{ec, pawset}, {conflict, lww}, {type, ordered_set}], {ok, pawset, ordered_set}},
             {[{ec, pawset}, {conflict, siblings}], {ok, pawset, bag}},
             {[{type, prwset}, {conflict, siblings}], {ok, prwset, bag}}],
    [?assertEqual({Opts, Want}, {Opts, hm_ec_registry:ec_spec(Opts)}) || {Opts, Want} <- Cases].

bag_and_conflicting_types_are_refused_test() ->
    Cases = [{[{ec, pawset}, {type, bag}], {type, bag}},
             {[{ec, pawset}, {type, prwset}], {type, prwset}},
             {[{type, pawset}, {type, ordered_set}], {type, ordered_set}},
             {[{type, pawset}, {type, prwset}], {type, prwset}},
             {[{ec, pawset}, {type, set}, {type, ordered_set}], {type, ordered_set}},
             {[{ec, pawset}, {type, {ordered_set}}], {type, {ordered_set}}},
             %% Mnesia has no ordered bag for the concurrent versions
             {[{ec, pawset}, {type, ordered_set}, {conflict, siblings}], {type, ordered_set}}],
    [?assertEqual({Opts, {error, Bad}}, {Opts, hm_ec_registry:ec_spec(Opts)})
     || {Opts, Bad} <- Cases].

storage_options_an_ec_table_sets_itself_are_refused_test() ->
    [?assertEqual({error, O}, hm_ec_registry:ec_spec([{ec, pawset}, O]))
     || O <- [{local_content, true}, {disc_only_copies, [n]}, {majority, true},
              {access_mode, read_write}]],
    ?assertEqual({error, {conflict, newest}},
                 hm_ec_registry:ec_spec([{ec, pawset}, {conflict, newest}])).

keys_of_an_ordered_set_ec_table_test() ->
    [?assert(hm_ec_access:is_exact_key(K))
     || K <- [1, 1.5, -2.25, a, "str", <<"bin">>, {k, 1}, [1, 2.5], #{a => 1}, {1, {2, 3}}]],
    [?assertNot(hm_ec_access:is_exact_key(K))
     || K <- [1.0, 0.0, -0.0, 2.0e9, {k, 3.0}, [1, 2.0], #{a => 1.0}, #{1.0 => a}]].
