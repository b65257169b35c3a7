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
