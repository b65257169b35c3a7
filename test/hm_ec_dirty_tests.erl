%% @doc The EC operations that carry a dirty change Mnesia reports on an EC table
%% (hm_ec_dirty:ops/3, pure), on a table in one piece and on a fragment of a partitioned one.
-module(hm_ec_dirty_tests).
-include_lib("eunit/include/eunit.hrl").

%% A table in one piece: every record and key belongs to it.
whole(Tab) -> #{record => fun(_) -> Tab end, key => fun(_) -> [Tab] end}.

%% Two fragments `t' and `t_frag2': keys 1 and odd ones in `t', even ones in `t_frag2'.
frags() ->
    Frag = fun(K) when is_integer(K), K rem 2 =:= 0 -> t_frag2;
              (_) -> t
           end,
    #{record => fun(R) -> Frag(element(2, R)) end, key => fun(K) -> [Frag(K)] end}.

write_becomes_an_ec_write_test() ->
    ?assertEqual([{t, {1, {write, {t, 1, a}}}}],
                 hm_ec_dirty:ops(t, {write, t, {t, 1, a}, [], {dirty, self()}}, whole(t))).

delete_becomes_an_ec_delete_test() ->
    ?assertEqual([{t, {1, delete}}],
                 hm_ec_dirty:ops(t, {delete, t, {t, 1}, [{t, 1, a}], {dirty, self()}}, whole(t))).

delete_object_becomes_an_ec_delete_object_test() ->
    ?assertEqual([{t, {1, {delete_object, {t, 1, a}}}}],
                 hm_ec_dirty:ops(t, {delete, t, {t, 1, a}, [{t, 1, a}], {dirty, self()}}, whole(t))).

record_name_other_than_the_table_test() ->
    ?assertEqual([{t, {1, {write, {r, 1, a}}}}],
                 hm_ec_dirty:ops(t, {write, t, {r, 1, a}, [], {dirty, self()}}, whole(t))),
    ?assertEqual([{t, {1, {delete_object, {r, 1, a}}}}],
                 hm_ec_dirty:ops(t, {delete, t, {r, 1, a}, [], {dirty, self()}}, whole(t))).

record_in_another_fragment_moves_to_its_own_test() ->
    ?assertEqual([{t, {3, {write, {t, 3, a}}}}],
                 hm_ec_dirty:ops(t, {write, t, {t, 3, a}, [], {dirty, self()}}, frags())),
    ?assertEqual([{t_frag2, {2, {write, {t, 2, a}}}}, {t, {2, {delete_object, {t, 2, a}}}}],
                 hm_ec_dirty:ops(t, {write, t, {t, 2, a}, [], {dirty, self()}}, frags())),
    ?assertEqual([{t, {2, delete}}, {t_frag2, {2, delete}}],
                 hm_ec_dirty:ops(t, {delete, t, {t, 2}, [], {dirty, self()}}, frags())).

other_events_issue_nothing_test() ->
    ?assertEqual([], hm_ec_dirty:ops(t, {write, other, {other, 1, a}, [], {dirty, self()}}, whole(t))),
    ?assertEqual([], hm_ec_dirty:ops(t, {delete_table, t}, whole(t))).

only_subscriber_test() ->
    ?assertNot(hm_ec_dirty:is_only_subscriber([])),
    ?assertNot(hm_ec_dirty:is_only_subscriber([{subscribers, [], [self()]}])).
