%% @doc The start-up check of the Mnesia internals that keep transactions out of EC tables
%% (hm_ec_mnesia:check_assumptions/2, pure, and self_check/0 against this node's Mnesia).
-module(hm_ec_mnesia_tests).
-include_lib("eunit/include/eunit.hrl").

%% The global variables of a Mnesia with the expected shape (OTP 25's, for one node).
good_gvars() ->
    #{{schema, access_mode} => read_write,
      {schema, majority} => false,
      {schema, where_to_write} => [n@h],
      {schema, where_to_wlock} => {[n@h], false},
      {schema, where_to_commit} => [{n@h, ram_copies}],
      {schema, commit_work} => [],
      {schema, storage_type} => ram_copies}.

lookup(Gvars) ->
    fun(Key) ->
            case Gvars of
                #{Key := V} -> {ok, V};
                _ -> undefined
            end
    end.

all_exported(_) -> true.

expected_shapes_pass_test() ->
    ?assertEqual(ok, hm_ec_mnesia:check_assumptions(fun all_exported/1,
                                                    lookup(good_gvars()))).

missing_function_is_named_test() ->
    Exported = fun(MFA) -> MFA =/= {mnesia_controller, update, 1} end,
    ?assertEqual({error, {missing_function, {mnesia_controller, update, 1}}},
                 hm_ec_mnesia:check_assumptions(Exported, lookup(good_gvars()))).

functions_checked_without_mnesia_running_test() ->
    ?assertEqual(ok, hm_ec_mnesia:check_assumptions(fun all_exported/1, none)),
    ?assertMatch({error, {missing_function, {mnesia_lib, set, 2}}},
                 hm_ec_mnesia:check_assumptions(fun(M) -> M =/= {mnesia_lib, set, 2} end,
                                                none)).

changed_lock_targets_are_named_test() ->
    Key = {schema, where_to_wlock},
    ?assertEqual({error, {gvar, Key, [n@h]}},
                 hm_ec_mnesia:check_assumptions(fun all_exported/1,
                                                lookup((good_gvars())#{Key := [n@h]}))).

missing_variable_is_named_test() ->
    Key = {schema, where_to_commit},
    ?assertEqual({error, {gvar, Key, missing}},
                 hm_ec_mnesia:check_assumptions(fun all_exported/1,
                                                lookup(maps:remove(Key, good_gvars())))).

commit_targets_must_be_node_storage_pairs_test() ->
    Key = {schema, where_to_commit},
    ?assertMatch({error, {gvar, Key, _}},
                 hm_ec_mnesia:check_assumptions(fun all_exported/1,
                                                lookup((good_gvars())#{Key := [n@h]}))).

%% This node's own Mnesia (whatever OTP release runs the tests) has what is relied on, before
%% and after it starts.
this_nodes_mnesia_passes_test_() ->
    {setup,
     fun() ->
             Running = mnesia:system_info(is_running),
             Before = hm_ec_mnesia:self_check(),
             OldDir = application:get_env(mnesia, dir),
             Dir = filename:join(os:getenv("TMPDIR", "/tmp"),
                                 "hm_ec_mnesia_" ++ os:getpid()),
             ok = application:set_env(mnesia, dir, Dir),
             ok = mnesia:start(),                  % no schema on disc: a ram schema
             #{running => Running, before => Before, old_dir => OldDir, dir => Dir}
     end,
     fun(#{running := Running, old_dir := OldDir, dir := Dir}) ->
             _ = Running =:= yes orelse mnesia:stop(),
             _ = case OldDir of
                     {ok, D} -> application:set_env(mnesia, dir, D);
                     undefined -> application:unset_env(mnesia, dir)
                 end,
             file:del_dir_r(Dir)
     end,
     fun(#{before := Before}) ->
             [?_assertEqual(ok, Before), ?_assertEqual(ok, hm_ec_mnesia:self_check())]
     end}.
