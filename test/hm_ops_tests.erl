%% @doc Units and properties of the operations tooling's pure parts: the watch beside a
%% table core (catch-ups and state transfers, on two cores over an in-test network), the
%% row digest, the cluster-wide comparison of {@link hm_status:summarize/2}, the JSON
%% encoder, the command-line tool's parsing and formatting, the status page's settings and
%% token check, and the events' log lines. The distributed side is in hm_ops_SUITE.
-module(hm_ops_tests).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_digest_order/0, prop_summarize/0, prop_watch/0]).

%%% ------------------------------------------------------------- the watch, on table cores

%% Copies of a table on `Nodes', wired to each other by an in-test network that drops what
%% is sent across a cut; every step is watched.
net(Nodes) ->
    Net0 = #{clock => 0, queue => [], events => [], nodes => Nodes, cuts => []},
    lists:foldl(fun(N, Net) ->
                        {T, Effs} = hm_ec_table:new(
                                      #{tab => t, type => pawset, policy => term_order,
                                        record => {t, 3}, cookie => c, node => N,
                                        incarnation => 1, members => Nodes,
                                        store => hm_ec_store_map:new(set, ram)}),
                        W = hm_ec_watch:new(clock(Net), T, t),
                        effects(N, Effs, Net#{N => {T, W}})
                end, Net0, Nodes).

pair() -> net([n1, n2]).

clock(#{clock := C}) -> {C, 1000000 + C}.

effects(N, Effs, Net = #{queue := Q, cuts := Cuts}) ->
    Net#{queue := Q ++ [{To, N, M} || {send, To, M} <- Effs, not lists:member({N, To}, Cuts)]}.

reachable(N, #{nodes := Ns, cuts := Cuts}) -> [M || M <- Ns, not lists:member({N, M}, Cuts)].

%% One step of node N's core, then its watch.
step(N, Fun, Net0 = #{clock := C}) ->
    Net = Net0#{clock := C + 10},
    {T, W} = maps:get(N, Net),
    {T1, Effs} = Fun(T),
    {W1, Evs} = hm_ec_watch:observe(clock(Net), T1, W),
    effects(N, Effs, Net#{N := {T1, W1}, events := maps:get(events, Net) ++ [{N, E} || E <- Evs]}).

deliver(Net = #{queue := []}) -> Net;
deliver(Net = #{queue := [{To, From, M} | Q]}) ->
    deliver(step(To, fun(T) -> hm_ec_table:handle(From, c, M, T) end, Net#{queue := Q})).

drop_all(Net) -> Net#{queue := []}.

ticks(0, Net) -> Net;
ticks(K, Net) ->
    ticks(K - 1, deliver(tick_all(Net))).

tick_all(Net = #{nodes := Ns}) ->
    lists:foldl(fun(N, Acc) ->
                        Up = reachable(N, Acc),
                        step(N, fun(T) -> hm_ec_table:tick(Up, T) end, Acc)
                end, Net, Ns).

write(N, Key, Net) ->
    step(N, fun(T) -> hm_ec_table:submit({Key, {write, {t, Key, N}}}, async, from,
                                          {0, []}, T) end, Net).

link(Fun, N, Peer, Net) ->
    {T, W} = maps:get(N, Net),
    Net#{N := {T, Fun(Peer, clock(Net), T, W)}}.

watch_catch_up_test() ->
    %% a brand-new table: both copies sync from each other, each a state transfer
    Net0 = ticks(3, deliver(pair())),
    ?assertMatch([{_, {state_transfer, #{table := t, rows := 0}}},
                  {_, {state_transfer, #{table := t, rows := 0}}}], maps:get(events, Net0)),
    %% a partition: each side writes, nothing gets through
    Net1 = link(fun hm_ec_watch:link_down/4, n2, n1, link(fun hm_ec_watch:link_down/4, n1, n2, Net0)),
    Net2 = drop_all(lists:foldl(fun({N, K}, Acc) -> write(N, K, Acc) end, Net1,
                                [{n1, 1}, {n1, 2}, {n1, 3}, {n2, 10}, {n2, 11}, {n2, 1}])),
    #{n1 := {T1, W1}} = Net2,
    {R1, _} = hm_ec_watch:report([], T1, W1),
    ?assertMatch(#{partitions_seen := 1, last_partition := #{peer := n2}, catching_up := []}, R1),
    %% the heal: both sides catch up; each reports what it received and what the other got
    Net3 = link(fun hm_ec_watch:link_up/4, n2, n1, link(fun hm_ec_watch:link_up/4, n1, n2,
                                                        Net2#{events := []})),
    ?assertMatch(#{catching_up := [n2]}, report(n1, Net3)),
    Net4 = ticks(6, Net3),
    Evs = maps:get(events, Net4),
    %% key 1, written on both sides, is the one conflict each side settled
    ?assertMatch([#{peer := n2, ops_received := 3, ops_sent := 3, conflicts_resolved := 1}],
                 [I || {n1, {catch_up, I}} <- Evs]),
    ?assertMatch([#{peer := n1, ops_received := 3, ops_sent := 3, conflicts_resolved := 1}],
                 [I || {n2, {catch_up, I}} <- Evs]),
    [#{duration_ms := D}] = [I || {n1, {catch_up, I}} <- Evs],
    ?assert(D > 0),
    %% reported once; the copies hold the same rows
    ?assertEqual(Evs, maps:get(events, ticks(3, Net4))),
    #{digest := Dg1, catching_up := [], last_heal := #{peer := n2}} = report(n1, Net4),
    #{digest := Dg2} = report(n2, Net4),
    ?assertEqual(Dg1, Dg2).

%% A member that goes down again before its catch-up is done gets none reported.
watch_abandoned_catch_up_test() ->
    Net0 = ticks(3, deliver(pair())),
    Net1 = drop_all(write(n2, 5, link(fun hm_ec_watch:link_down/4, n1, n2, Net0#{events := []}))),
    Net2 = link(fun hm_ec_watch:link_up/4, n1, n2, Net1),
    Net3 = link(fun hm_ec_watch:link_down/4, n1, n2, Net2),
    ?assertEqual([], [E || {n1, E = {catch_up, _}} <- maps:get(events, ticks(4, Net3))]),
    ?assertMatch(#{partitions_seen := 2, catching_up := []}, report(n1, Net3)).

%% Random schedules on three copies: writes, cuts and heals of single links (as the table's
%% process sees them: the watch, then the core), ticks, deliveries; then every cut healed
%% and ticks until quiet. A catch-up is reported at most once per reconnection, and never
%% for a member that went down since; in the end no catch-up is left pending and every copy
%% has the same digest.
watch_cmds() ->
    Pair = elements([{n1, n2}, {n1, n3}, {n2, n3}]),
    list(frequency([{4, {write, elements([n1, n2, n3])}}, {2, {cut, Pair}}, {3, {heal, Pair}},
                    {4, tick}, {3, {deliver, choose(1, 8)}}])).

prop_watch() ->
    Nodes = [n1, n2, n3],
    ?SAFE_FORALL(Cmds, watch_cmds(),
                 begin
                     Net0 = (ticks(3, deliver(net(Nodes))))#{events := [], links => []},
                     {Net1, _} = lists:foldl(fun run_cmd/2, {Net0, 0}, Cmds),
                     Pairs = [{A, B} || A <- Nodes, B <- Nodes, A < B],
                     Net2 = flush(ticks(12, lists:foldl(fun({A, B}, Acc) -> heal(A, B, Acc) end,
                                                        Net1, Pairs))),
                     Reports = [report(N, Net2) || N <- Nodes],
                     Once = once_per_reconnection(lists:reverse(maps:get(links, Net2))),
                     ?WHENFAIL(io:format("~p~n~p~n", [Reports, lists:reverse(maps:get(links, Net2))]),
                               Once andalso
                               lists:all(fun(#{catching_up := C}) -> C =:= [] end, Reports) andalso
                               length(lists:usort([D || #{digest := D} <- Reports])) =:= 1)
                 end).

run_cmd({write, N}, {Net, K}) -> {write(N, K rem 5, Net), K + 1};
run_cmd({cut, {A, B}}, {Net, K}) -> {cut(A, B, Net), K};
run_cmd({heal, {A, B}}, {Net, K}) -> {heal(A, B, Net), K};
run_cmd(tick, {Net, K}) -> {deliver(tick_all(Net)), K};
run_cmd({deliver, M}, {Net = #{queue := Q}, K}) ->
    {Now, Later} = lists:split(min(M, length(Q)), Q),
    {lists:foldl(fun({To, From, Msg}, Acc) ->
                         step(To, fun(T) -> hm_ec_table:handle(From, c, Msg, T) end, Acc)
                 end, Net#{queue := Later}, Now), K}.

%% Cut the link between A and B: what is in flight between them is lost, each side's
%% process sees the other go down.
cut(A, B, Net = #{cuts := Cuts, queue := Q}) ->
    case lists:member({A, B}, Cuts) of
        true -> Net;
        false ->
            Net1 = Net#{cuts := [{A, B}, {B, A} | Cuts],
                        queue := [E || E = {To, From, _} <- Q,
                                       not lists:member({To, From}, [{A, B}, {B, A}])]},
            lists:foldl(fun({X, Y}, Acc) ->
                                Acc1 = log_link({X, down, Y}, link(fun hm_ec_watch:link_down/4, X, Y, Acc)),
                                step(X, fun(T) -> hm_ec_table:nodedown(Y, T) end, Acc1)
                        end, Net1, [{A, B}, {B, A}])
    end.

heal(A, B, Net = #{cuts := Cuts}) ->
    case lists:member({A, B}, Cuts) of
        false -> Net;
        true ->
            Net1 = Net#{cuts := Cuts -- [{A, B}, {B, A}]},
            lists:foldl(fun({X, Y}, Acc) ->
                                Acc1 = log_link({X, up, Y}, link(fun hm_ec_watch:link_up/4, X, Y, Acc)),
                                step(X, fun(T) -> hm_ec_table:nodeup(Y, T) end, Acc1)
                        end, Net1, [{A, B}, {B, A}])
    end.

%% The links' history, with the catch-ups reported (from `events') in between.
log_link(What, Net) ->
    Net1 = #{links := L} = flush(Net),
    Net1#{links := [What | L]}.

flush(Net = #{links := L, events := Evs}) ->
    CatchUps = [{N, catch_up, P} || {N, {catch_up, #{peer := P}}} <- Evs],
    Net#{links := lists:reverse(CatchUps) ++ L, events := []}.

once_per_reconnection(History) ->
    {Ok, _} = lists:foldl(
                fun({N, up, P}, {Ok, Pending}) -> {Ok, Pending#{{N, P} => true}};
                   ({N, down, P}, {Ok, Pending}) -> {Ok, Pending#{{N, P} => false}};
                   ({N, catch_up, P}, {Ok, Pending}) ->
                        {Ok andalso maps:get({N, P}, Pending, false), Pending#{{N, P} => false}}
                end, {true, #{}}, History),
    Ok.

report(N, Net) ->
    {T, W} = maps:get(N, Net),
    {R, W1} = hm_ec_watch:report([n1, n2], T, W),
    %% a second report, from the cached digest, is the same
    ?assertEqual({R, W1}, hm_ec_watch:report([n1, n2], T, W1)),
    R.

%%% ------------------------------------------------------------- digest

digest_test() ->
    D = hm_ec_watch:digest([{t, 1, a}, {t, 2, b}]),
    ?assertEqual(D, hm_ec_watch:digest([{t, 2, b}, {t, 1, a}])),
    ?assertNotEqual(D, hm_ec_watch:digest([{t, 1, a}])),
    ?assertNotEqual(D, hm_ec_watch:digest([{t, 1, a}, {t, 2, c}])),
    ?assertEqual(<<"00000000000000000000000000000000">>, hm_ec_watch:digest([])),
    ?assertMatch({match, _}, re:run(D, "^[0-9a-f]{32}$")).

prop_digest_order() ->
    ?SAFE_FORALL({Rows, Seed}, {list({t, integer(), term()}), integer()},
                 begin
                     _ = rand:seed(exsss, {Seed, 1, 2}),
                     Shuffled = [R || {_, R} <- lists:sort([{rand:uniform(), R} || R <- Rows])],
                     hm_ec_watch:digest(Rows) =:= hm_ec_watch:digest(Shuffled)
                 end).

%%% ------------------------------------------------------------- summarize

%% Answers of 1..4 members for table t: vectors, digests and statuses from small domains, so
%% that equal and different ones both come up; some members do not answer.
answers() ->
    ?LET(N, choose(1, 4),
         [{list_to_atom("n" ++ integer_to_list(I)), answer(N)} || I <- lists:seq(1, N)]).

answer(N) ->
    frequency([{1, {error, oneof([timeout, unreachable, not_running])}},
               {6, ?LET(Copy, copy(N), {ok, #{membership => #{connected => []}, mnesia => yes,
                                               copies => #{t => Copy}}})}]).

copy(N) ->
    Members = [list_to_atom("n" ++ integer_to_list(I)) || I <- lists:seq(1, N)],
    frequency([{1, {error, timeout}},
               {8, ?LET({V, S, D, B, St},
                        {vv(), vv(), oneof([<<"d1">>, <<"d2">>]), frequency([{4, 0}, {1, 1}]),
                         frequency([{5, ready}, {1, syncing}])},
                        #{delivered => V, stable => hm_vv:meet(S, V), digest => D,
                          buffered_ops => B, status => St, members => Members,
                          size => 0, unstable_ops => 0})}]).

vv() -> ?LET(L, list({oneof([{n1, 1}, {n2, 1}]), choose(0, 2)}), hm_vv:from_list(L)).

prop_summarize() ->
    ?SAFE_FORALL(Answers, answers(),
                 begin
                     #{converged := C, tables := Ts} = hm_status:summarize(all, Answers),
                     Copies = [Cp || {_, {ok, #{copies := #{t := Cp}}}} <- Answers],
                     AllOk = lists:all(fun({_, A}) -> element(1, A) =:= ok end, Answers)
                         andalso lists:all(fun(#{status := ready, buffered_ops := 0}) -> true;
                                              (_) -> false
                                           end, Copies),
                     Same = fun(K) -> length(lists:usort([maps:get(K, Cp) || Cp <- Copies])) =:= 1 end,
                     Expected = AllOk andalso Copies =/= [] andalso Same(delivered) andalso Same(digest),
                     Views = case Ts of
                                 #{t := #{copies := Vs}} -> maps:values(Vs);
                                 _ -> []
                             end,
                     Top = lists:foldl(fun hm_vv:join/2, hm_vv:new(),
                                       [V || #{delivered := V} <- Copies]),
                     %% a copy that has everything has lag 0, and only such a copy
                     LagOk = lists:all(fun(#{lag := L, delivered := V}) ->
                                               (L =:= 0) =:= hm_vv:leq(Top, V);
                                          (_) -> true
                                       end, Views),
                     ?WHENFAIL(io:format("~p~n=> ~p~n", [Answers, hm_status:summarize(all, Answers)]),
                               C =:= Expected andalso LagOk andalso
                                   (not C orelse lists:all(fun(#{lag := L}) -> L =:= 0 end, Views)))
                 end).

summarize_test_() ->
    [?_assert(hm_crdt_prop:check(prop_summarize())),
     ?_assert(hm_crdt_prop:check(prop_digest_order())),
     {timeout, 120, ?_assert(hm_crdt_prop:check(prop_watch()))}].

summarize_unreachable_test() ->
    Copy = #{delivered => #{}, stable => #{}, digest => <<"d">>, buffered_ops => 0,
             status => ready, members => [a, b]},
    Ok = {ok, #{membership => #{connected => [a]}, mnesia => yes, copies => #{t => Copy}}},
    #{converged := false, nodes := #{b := #{status := unreachable}},
      tables := #{t := #{pending := [{b, unreachable}], copies := #{b := #{status := unreachable}}}}} =
        hm_status:summarize(all, [{a, Ok}, {b, {error, unreachable}}]),
    %% a member that answered without a copy of the table
    Without = {ok, #{membership => #{}, mnesia => yes, copies => #{}}},
    #{tables := #{t := #{copies := #{b := #{status := no_copy}}}}} =
        hm_status:summarize(t, [{a, Ok}, {b, Without}]).

%%% ------------------------------------------------------------- JSON

json_test() ->
    J = fun(T) -> iolist_to_binary(hm_json:encode(T)) end,
    ?assertEqual(<<"{\"a\":1,\"b\":[true,false,null],\"c\":\"x\"}">>,
                 J(#{a => 1, b => [true, false, undefined], c => <<"x">>})),
    ?assertEqual(<<"{\"n1@h/7\":3}">>, J(#{{'n1@h', 7} => 3})),
    ?assertEqual(<<"[\"a\",1.5,[1,2]]">>, J({a, 1.5, {1, 2}})),
    ?assertEqual(<<"\"q\\\"\\\\\\n\\u0001é\""/utf8>>, J(<<"q\"\\\n", 1, "é"/utf8>>)),
    ?assertMatch(<<"\"<0.", _/binary>>, J(self())).

%%% ------------------------------------------------------------- hmctl

parse_test() ->
    {ok, #{node := 'a@h', names := shortnames, command := status, json := false}} =
        hm_ctl:parse(["-sname", "a@h", "status"]),
    {ok, #{node := 'a@h.x', names := longnames, cookie := k, command := wait_converged,
           timeout_s := 9, json := true}} =
        hm_ctl:parse(["-name", "a@h.x", "-setcookie", "k", "--json", "wait-converged",
                      "--timeout", "9"]),
    {error, _} = hm_ctl:parse([]),
    {error, _} = hm_ctl:parse(["status"]),
    {error, _} = hm_ctl:parse(["-sname", "a@h"]),
    %% a name without a host is on this host, as for `erl -sname a'
    {ok, Here} = inet:gethostname(),
    [Short | _] = string:split(Here, "."),
    Local = list_to_atom("a@" ++ Short),
    {ok, #{node := Local, names := shortnames}} = hm_ctl:parse(["-sname", "a", "status"]),
    {error, _} = hm_ctl:parse(["-sname", "a@", "status"]),
    {error, _} = hm_ctl:parse(["-sname", "a@h", "frob"]),
    {error, _} = hm_ctl:parse(["-sname", "a@h", "status", "extra"]),
    {error, _} = hm_ctl:parse(["-sname", "a@h", "wait-converged", "--timeout", "soon"]),
    {error, _} = hm_ctl:parse(["-x", "status"]),
    ?assertMatch({2, _}, hm_ctl:run(["status"])).

format_test() ->
    Info = #{converged => false,
             nodes => #{a => #{status => up, connected => [a, b], partitions_seen => 2,
                               mnesia_rejoins => 1,
                               last_heal => #{table => t, peer => b, duration_ms => 40,
                                              ops_received => 5, ops_sent => 2, time => 1}},
                        c => #{status => unreachable}},
             tables => #{t => #{converged => false, pending => [{c, unreachable}],
                                copies => #{a => #{status => ready, size => 3, lag => 0,
                                                   buffered_ops => 0, unstable_ops => 2,
                                                   digest => <<"0123456789abcdef0123">>},
                                            c => #{status => unreachable}}}}},
    S = lists:flatten(io_lib:format("~s", [hm_ctl:format(status, Info)])),
    ?assertNotEqual(nomatch, string:find(S, "cluster: NOT converged")),
    ?assertNotEqual(nomatch, string:find(S, "members: 2, 1 reachable")),
    ?assertNotEqual(nomatch, string:find(S, "t NOT converged (waiting for: [{c,unreachable}])")),
    M = lists:flatten(io_lib:format("~s", [hm_ctl:format(members, Info)])),
    ?assertNotEqual(nomatch, string:find(M, "[b] / t with b: 40 ms, 5 ops in, 2 out")),
    ?assertNotEqual(nomatch, string:find(M, "unreachable")),
    T = lists:flatten(io_lib:format("~s", [hm_ctl:format(tables, Info)])),
    ?assertNotEqual(nomatch, string:find(T, "0123456789ab")),
    ?assertEqual(nomatch, string:find(T, "0123456789abc")).

%% A partitioned table is one table in hmctl's answers: its fragments' copies summed per
%% node, converged when every fragment is; `--fragments' shows each fragment.
format_partitioned_test() ->
    Copy = fun(Size, Lag) -> #{status => ready, size => Size, lag => Lag, buffered_ops => 0,
                               unstable_ops => 1, digest => <<"0123456789abcdef0123">>}
           end,
    Tables = #{p => #{converged => true, pending => [], fragment_of => p,
                      copies => #{a => Copy(3, 0), b => Copy(3, 0)}},
               p_frag2 => #{converged => false, pending => [{c, syncing}], fragment_of => p,
                            copies => #{b => Copy(4, 2), c => #{status => syncing}}},
               t => #{converged => true, pending => [], copies => #{a => Copy(7, 0)}}},
    #{p := #{converged := false, fragments := 2, pending := [{p_frag2, {c, syncing}}],
             copies := #{a := #{status := ready, size := 3, fragments := 1},
                         b := #{status := ready, size := 7, lag := 2, unstable_ops := 2,
                                fragments := 2},
                         c := #{status := syncing, fragments := 1}}},
      t := #{converged := true}} = Grouped = hm_ctl:group_fragments(Tables),
    2 = map_size(Grouped),
    Info = #{converged => false, nodes => #{}, tables => Tables},
    Text = fun(Cmd, O) -> lists:flatten(io_lib:format("~s", [hm_ctl:format(Cmd, Info, O)])) end,
    S = Text(status, #{}),
    ?assertNotEqual(nomatch, string:find(S, "tables: 2\n")),
    ?assertNotEqual(nomatch, string:find(S, "p (2 fragments) NOT converged")),
    ?assertEqual(nomatch, string:find(S, "  p_frag2")),
    T = Text(tables, #{}),
    ?assertNotEqual(nomatch, string:find(T, "p (2 fragments): NOT converged")),
    ?assertEqual(nomatch, string:find(T, "p_frag2:")),
    F = Text(tables, #{fragments => true}),
    ?assertNotEqual(nomatch, string:find(F, "p_frag2: NOT converged")),
    ?assert(lists:prefix("p: converged", F)),
    {ok, #{fragments := true}} = hm_ctl:parse(["-sname", "a@h", "--fragments", "tables"]).

%%% ------------------------------------------------------------- status page settings

http_config_test() ->
    {ok, #{port := 0, token := <<"s">>}} = hm_http:check_config(#{port => 0, token => "s"}),
    {error, no_token} = hm_http:check_config(#{port => 80}),
    {error, {bad_token, <<>>}} = hm_http:check_config(#{port => 80, token => <<>>}),
    {error, {bad_port, 70000}} = hm_http:check_config(#{port => 70000, token => <<"s">>}),
    {error, {unknown_key, ip}} = hm_http:check_config(#{port => 1, token => <<"s">>, ip => any}),
    {error, _} = hm_http:check_config(8080).

http_token_test() ->
    Tok = <<"secret">>,
    ?assert(hm_http:authorized({"/status?token=secret", []}, Tok)),
    ?assert(hm_http:authorized({"/status?format=json&token=secret", []}, Tok)),
    ?assert(hm_http:authorized({"/status", [{"authorization", "Bearer secret"}]}, Tok)),
    ?assertNot(hm_http:authorized({"/status", []}, Tok)),
    ?assertNot(hm_http:authorized({"/status?token=secreT", []}, Tok)),
    ?assertNot(hm_http:authorized({"/status?token=secret2", []}, Tok)),
    ?assertNot(hm_http:authorized({"/status?token=", []}, Tok)).

%%% ------------------------------------------------------------- events

events_format_test() ->
    Line = fun(R) -> {F, A} = hm_events:format(R), lists:flatten(io_lib:format(F, A)) end,
    ?assertEqual("hypermnesia: t caught up with b in 40 ms (5 operations received, 2 sent, "
                 "1 conflicts resolved)",
                 Line(#{hypermnesia_event => catch_up,
                        info => #{table => t, peer => b, duration_ms => 40, ops_received => 5,
                                  ops_sent => 2, conflicts_resolved => 1}})),
    ?assertEqual("hypermnesia: b is unreachable (partition seen)",
                 Line(#{hypermnesia_event => partition, info => #{peer => b}})),
    [?assertMatch("hypermnesia: " ++ _, Line(#{hypermnesia_event => E, info => #{}}))
     || E <- hm_events:events()],
    {error, {bad_event, nope}} = hm_events:subscribe(nope),
    {error, {node_not_running, _}} = hm_events:subscribe(all).
