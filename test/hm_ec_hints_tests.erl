%% @doc Properties of the hand-off order of hints ({@link hm_ec_hints:pass_on/4}): whatever
%% holders take or refuse, hints leave oldest first, a hint is never skipped, and a new write
%% never overtakes a hint of its table. Run through EUnit.
-module(hm_ec_hints_tests).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_order/0]).

%% Pending hints 1..P, a new write (or none), and the answers holders give, in turn.
prop_order() ->
    ?SAFE_FORALL({P, New, Answers}, {range(0, 6), oneof([none, new]), list(boolean())},
                 begin
                     Pending = [{I, {k, I}} || I <- lists:seq(1, P)],
                     Try = fun(KeyOp, {[A | As], Log}) ->
                                   {case A of true -> ok; false -> unreachable end,
                                    {As, [{KeyOp, A} | Log]}};
                              (KeyOp, {[], Log}) -> {unreachable, {[], [{KeyOp, false} | Log]}}
                           end,
                     {Sent, Outcome, {_, Log}} = hm_ec_hints:pass_on(Pending, New, Try,
                                                                     {Answers, []}),
                     Tried = lists:reverse(Log),
                     Taken = [K || {K, true} <- Tried],
                     %% hints taken are a prefix of the pending ones, in order
                     Sent =:= lists:sublist(lists:seq(1, P), length(Sent))
                         andalso Taken -- [new] =:= [{k, I} || I <- Sent]
                         %% the new write is tried only once every hint is gone
                         andalso (not lists:keymember(new, 1, Tried)
                                  orelse length(Sent) =:= P)
                         andalso case {New, Outcome} of
                                     {none, none} -> true;
                                     {new, sent} -> lists:member(new, Taken);
                                     {new, kept} -> not lists:member(new, Taken);
                                     _ -> false
                                 end
                 end).

order_test_() ->
    {timeout, 120, ?_assert(hm_crdt_prop:check(prop_order()))}.

%% The order a node tries the holders in: never itself, only those up, the same every time.
holder_order_test() ->
    Hs = [a@h, b@h, c@h, d@h],
    Order = hm_ec_frag:holder_order(a@h, Hs, [b@h, c@h, x@h]),
    ?assertEqual(lists:sort(Order), [b@h, c@h]),
    ?assertEqual(Order, hm_ec_frag:holder_order(a@h, lists:reverse(Hs), [c@h, b@h])).

%% Session order: a copy takes a write passed on by a node only once it has delivered the
%% node's earlier writes (hm_ec_table:submit_after/6), and answers with the write's dot.
copy(Node, Members) ->
    {T, _} = hm_ec_table:new(opts(Node, Members)),
    T.

opts(Node, Members) ->
    #{tab => t, type => pawset, policy => term_order, record => {r, 3}, cookie => c,
      node => Node, incarnation => 1, members => Members, store => hm_ec_store_map:new(set, ram)}.

%% Two copies of a brand-new table, ready: their state-transfer messages delivered.
pair() ->
    {A, EA} = hm_ec_table:new(opts(a, [a, b])),
    {B, EB} = hm_ec_table:new(opts(b, [a, b])),
    pump(#{a => A, b => B}, [{a, To, M} || {send, To, M} <- EA] ++
                                [{b, To, M} || {send, To, M} <- EB]).

pump(Cs, []) -> {maps:get(a, Cs), maps:get(b, Cs)};
pump(Cs, [{From, To, M} | Rest]) ->
    {T1, Effs} = hm_ec_table:handle(From, c, M, maps:get(To, Cs)),
    pump(Cs#{To := T1}, Rest ++ [{To, N, M2} || {send, N, M2} <- Effs]).

session_after_test() ->
    {A0, B0} = pair(),
    ready = hm_ec_table:status(A0),
    ready = hm_ec_table:status(B0),
    %% a takes the node's first write: the session names its dot
    {A1, EffsA} = hm_ec_table:submit_after(#{}, {k, {write, {r, k, 1}}}, async, me,
                                           {1, [b]}, A0),
    [{ok, Dot}] = [R || {reply, me, R} <- EffsA],
    ?assertMatch({{a, _}, 1}, Dot),
    After = hm_ec_hints:session_add(Dot, #{}),
    ?assert(hm_ec_table:covers(After, A1)),
    %% b has not delivered it: it refuses the next write, unchanged
    ?assertNot(hm_ec_table:covers(After, B0)),
    ?assertMatch({B0, [{reply, me, {error, {behind, t}}}]},
                 hm_ec_table:submit_after(After, {k, {write, {r, k, 2}}}, async, me, {2, [a]},
                                          B0)),
    %% once b delivered it, b takes the write, causally after the first
    [Msg] = [M || {send, b, M = {op, _}} <- EffsA],
    {B1, _} = hm_ec_table:handle(a, c, Msg, B0),
    {_, EffsB} = hm_ec_table:submit_after(After, {k, {write, {r, k, 2}}}, async, me, {2, [a]},
                                          B1),
    [{ok, {{b, _}, 1}}] = [R || {reply, me, R} <- EffsB],
    [{_, Ts, _}] = [M || {send, a, {op, M}} <- EffsB],
    ?assert(hm_vv:contains(Dot, Ts)).

%% A dot of an incarnation that is gone (its node left the members) blocks nothing.
session_gone_incarnation_test() ->
    B0 = copy(b, [b, c]),
    ?assert(hm_ec_table:covers(#{{a, 1} => 3}, B0)),
    ?assertNot(hm_ec_table:covers(#{{c, 1} => 1}, B0)).

session_add_test() ->
    ?assertEqual(#{}, hm_ec_hints:session_add(none, #{})),
    ?assertEqual(#{a => 3, b => 1},
                 hm_ec_hints:session_add({a, 3}, hm_ec_hints:session_add({b, 1}, #{a => 2}))),
    ?assertEqual(#{a => 3}, hm_ec_hints:session_add({a, 2}, #{a => 3})).

%% pending/1 and session/1 look at the first key of their table before they select: neither
%% may miss a table's entries, nor take another table's, whatever sorts next to them
pending_and_session_per_table_test() ->
    Owned = case ets:whereis(hm_ec_hints) of
                undefined -> ok = hm_ec_hints:init(), true;
                _ -> false
            end,
    [A, B, C] = [hm_hints_test_a, hm_hints_test_b, hm_hints_test_c],
    try
        ?assertEqual([], hm_ec_hints:pending(B)),
        ?assertEqual(#{}, hm_ec_hints:session(B)),
        ok = hm_ec_hints:add(A, {1, delete}),
        ok = hm_ec_hints:add(C, {3, delete}),
        ok = hm_ec_hints:note(A, {{n1, 1}, 4}),
        ok = hm_ec_hints:note(C, {{n1, 1}, 5}),
        %% B sorts between A and C, in hints and in sessions
        ?assertEqual([], hm_ec_hints:pending(B)),
        ?assertEqual(#{}, hm_ec_hints:session(B)),
        ok = hm_ec_hints:add(B, {2, delete}),
        ok = hm_ec_hints:add(B, {22, delete}),
        ok = hm_ec_hints:note(B, {{n2, 1}, 7}),
        ?assertMatch([{{B, _}, {2, delete}}, {{B, _}, {22, delete}}], hm_ec_hints:pending(B)),
        ?assertEqual(#{{n2, 1} => 7}, hm_ec_hints:session(B)),
        ?assertMatch([{{A, _}, {1, delete}}], hm_ec_hints:pending(A)),
        ?assertMatch([{{C, _}, {3, delete}}], hm_ec_hints:pending(C)),
        ?assertEqual(#{{n1, 1} => 5}, hm_ec_hints:session(C))
    after
        case Owned of
            true -> ets:delete(hm_ec_hints);
            false -> [ets:match_delete(hm_ec_hints, {{T, '_'}, '_'}) || T <- [A, B, C]],
                     [ets:match_delete(hm_ec_hints, {{'$session', T, '_'}, '_'}) || T <- [A, B, C]]
        end
    end.
