%% @doc The Prometheus text exposition of a node's metrics (hm_metrics:render/3): every family
%% once with its HELP and TYPE, samples labelled by node, table and member, label values
%% escaped, and nothing for what the reports lack.
-module(hm_metrics_tests).
-include_lib("eunit/include/eunit.hrl").

local() ->
    #{hints => 2,
      membership => #{members => [a@h, b@h, c@h], connected => [a@h, b@h],
                      partitions_seen => 3, mnesia_rejoins => 1},
      tables => #{t => #{status => ready, size => 10, unstable_ops => 4, unstable_keys => 2,
                         buffered_ops => 0, sync_waiting => 0, conflicts => 5,
                         duplicates => 1, state_catch_ups => 0, metadata_words => 100,
                         given_up_keys => 6},
                  u => #{status => syncing, size => 0, given_up_keys => all}}}.

cluster() ->
    #{tables => #{t => #{converged => false,
                         copies => #{a@h => #{lag => 0}, b@h => #{lag => 7},
                                     c@h => #{status => unreachable}}}}}.

text(Local, Cluster) ->
    unicode:characters_to_list(iolist_to_binary(hm_metrics:render(a@h, Local, Cluster))).

lines(Text) -> string:split(Text, "\n", all).

node_and_table_samples_test() ->
    L = lines(text(local(), cluster())),
    Has = fun(Line) -> ?assert(lists:member(Line, L), Line) end,
    Has("hypermnesia_members{node=\"a@h\"} 3"),
    Has("hypermnesia_members_reachable{node=\"a@h\"} 2"),
    Has("hypermnesia_partitions_seen_total{node=\"a@h\"} 3"),
    Has("hypermnesia_hints{node=\"a@h\"} 2"),
    Has("hypermnesia_table_ready{node=\"a@h\",table=\"t\"} 1"),
    Has("hypermnesia_table_ready{node=\"a@h\",table=\"u\"} 0"),
    Has("hypermnesia_table_unstable_ops{node=\"a@h\",table=\"t\"} 4"),
    Has("hypermnesia_table_given_up_keys{node=\"a@h\",table=\"t\"} 6"),
    %% `all' (after a clear) is not a number: no sample
    ?assertNot(lists:any(fun(Line) ->
                                 lists:prefix("hypermnesia_table_given_up_keys{node=\"a@h\",table=\"u\"}",
                                              Line)
                         end, L)),
    Has("hypermnesia_table_conflicts_total{node=\"a@h\",table=\"t\"} 5"),
    Has("hypermnesia_table_metadata_bytes{node=\"a@h\",table=\"t\"} "
        ++ integer_to_list(100 * erlang:system_info(wordsize))),
    Has("hypermnesia_table_converged{node=\"a@h\",table=\"t\"} 0"),
    Has("hypermnesia_table_lag{member=\"b@h\",node=\"a@h\",table=\"t\"} 7"),
    Has("hypermnesia_table_member_up{member=\"c@h\",node=\"a@h\",table=\"t\"} 0"),
    %% a member that did not answer has no lag sample
    ?assertEqual([], [X || X <- L, string:prefix(X, "hypermnesia_table_lag{member=\"c@h\"")
                                       =/= nomatch]).

every_family_once_with_help_and_type_test() ->
    L = lines(text(local(), cluster())),
    Types = [X || X <- L, string:prefix(X, "# TYPE ") =/= nomatch],
    Names = [lists:nth(3, string:split(X, " ", all)) || X <- Types],
    ?assertEqual(lists:usort(Names), lists:sort(Names)),
    [?assertMatch([_], [H || H <- L, string:prefix(H, "# HELP " ++ N ++ " ") =/= nomatch])
     || N <- Names],
    %% every sample belongs to a family announced before it, and is `name{labels} integer'
    Samples = [X || X <- L, X =/= "", string:prefix(X, "#") =:= nomatch],
    [begin
         [NameLabels, Value] = string:split(S, "} "),
         [Name, _] = string:split(NameLabels, "{"),
         ?assert(lists:member(Name, Names)),
         _ = list_to_integer(Value)
     end || S <- Samples],
    [?assert(lists:suffix("_total", N))
     || X <- Types, [_, _, N, "counter"] <- [string:split(X, " ", all)]].

nothing_known_gives_no_family_test() ->
    ?assertEqual("", text(#{}, #{})).

label_values_are_escaped_test() ->
    Local = #{tables => #{'a"b\\c' => #{size => 1}}},
    ?assert(lists:member("hypermnesia_table_rows{node=\"a@h\",table=\"a\\\"b\\\\c\"} 1",
                         lines(text(Local, #{})))).
