%% @doc EUnit examples for the registers and the flag (`lwwreg', `mvreg', `ewflag'), every
%% flavor: values after a few operations, concurrent operations, last-writer-wins ties,
%% automatic timestamps, bad operations, and the op flavor's PO-log emptied by stability.
-module(hm_registers_tests).
-include_lib("eunit/include/eunit.hrl").

%%% ---------------------------------------------------------------- helpers

flavors() -> hm_crdt:flavors().

%% Apply operations one after the other at one replica.
local(C, R, Ops) ->
    lists:foldl(fun(Op, Acc) -> {ok, Acc1, _} = hm_crdt:mutate(Op, R, Acc), Acc1 end, C, Ops).

%% Each of `a' and `b' applies its operation from the same start `C', then they exchange
%% events; returns both replicas.
concurrent(C, OpA, OpB) ->
    {ok, A, EA} = hm_crdt:mutate(OpA, a, C),
    {ok, B, EB} = hm_crdt:mutate(OpB, b, C),
    {hm_crdt:deliver(EB, A), hm_crdt:deliver(EA, B)}.

%% `a' applies its operations, `b' then sees them all.
shared(Type, Flavor, Ops) ->
    lists:foldl(fun(Op, {A, B}) ->
                        {ok, A1, E} = hm_crdt:mutate(Op, a, A),
                        {A1, hm_crdt:deliver(E, B)}
                end, {hm_crdt:new(Type, Flavor), hm_crdt:new(Type, Flavor)}, Ops).

%% `a' and `b' share the past `Past', then each applies one operation and they exchange
%% events: the value both show (checked equal).
converged(Type, Flavor, Past, OpA, OpB) ->
    {A0, B0} = shared(Type, Flavor, Past),
    {ok, A1, EA} = hm_crdt:mutate(OpA, a, A0),
    {ok, B1, EB} = hm_crdt:mutate(OpB, b, B0),
    A2 = hm_crdt:deliver(EB, A1),
    B2 = hm_crdt:deliver(EA, B1),
    ?assertEqual(hm_crdt:value(A2), hm_crdt:value(B2)),
    hm_crdt:value(A2).

value_after(Type, Flavor, Ops) -> hm_crdt:value(local(hm_crdt:new(Type, Flavor), a, Ops)).

%%% ---------------------------------------------------------------- lwwreg

lwwreg_sequential_test_() ->
    [{atom_to_list(F),
      [?_assertEqual(undefined, hm_crdt:value(hm_crdt:new(lwwreg, F))),
       ?_assertEqual(x, value_after(lwwreg, F, [{assign, x, 1}])),
       ?_assertEqual(y, value_after(lwwreg, F, [{assign, x, 1}, {assign, y, 2}])),
       %% a later assign with a smaller timestamp loses
       ?_assertEqual(x, value_after(lwwreg, F, [{assign, x, 5}, {assign, y, 3}])),
       %% same key, same replica: the later one wins
       ?_assertEqual(y, value_after(lwwreg, F, [{assign, x, 1}, {assign, y, 1}])),
       ?_assertEqual(z, value_after(lwwreg, F, [{assign, x, 7}, {assign, z}]))]}
     || F <- flavors()].

lwwreg_concurrent_test_() ->
    [{atom_to_list(F),
      [%% greater timestamp wins whatever the replica
       ?_assertEqual(x, converged(lwwreg, F, [], {assign, x, 3}, {assign, y, 2})),
       %% equal timestamps: the greater replica wins
       ?_assertEqual(y, converged(lwwreg, F, [], {assign, x, 2}, {assign, y, 2})),
       ?_assertEqual(y, converged(lwwreg, F, [{assign, w, 0}], {assign, x, 2},
                                  {assign, y, 2})),
       %% a concurrent assign with a smaller key does not replace a seen greater one
       ?_assertEqual(w, converged(lwwreg, F, [{assign, w, 9}], {assign, x, 2},
                                  {assign, y, 2}))]}
     || F <- flavors()].

%% `{assign, V}' beats everything the replica has seen, even a timestamp in the far future.
lwwreg_auto_timestamp_test_() ->
    Future = erlang:system_time(microsecond) + 1000000000000,
    [{atom_to_list(F),
      fun() ->
              {ok, B, EB} = hm_crdt:mutate({assign, y, Future}, b, hm_crdt:new(lwwreg, F)),
              A = hm_crdt:deliver(EB, hm_crdt:new(lwwreg, F)),
              ?assertEqual(y, hm_crdt:value(A)),
              {ok, A1, EA} = hm_crdt:mutate({assign, z}, a, A),
              ?assertEqual(z, hm_crdt:value(A1)),
              ?assertEqual(z, hm_crdt:value(hm_crdt:deliver(EA, B)))
      end} || F <- flavors()].

%% The op flavor sends the timestamp prepare/3 fixed.
lwwreg_prepared_op_test() ->
    {ok, _, {hm_event, op, lwwreg, {a, _, PureOp}}} =
        hm_crdt:mutate({assign, x}, a, hm_crdt:new(lwwreg, op)),
    ?assertMatch({assign, x, Ts} when is_integer(Ts) andalso Ts > 0, PureOp),
    ?assert(hm_crdt:is_op(lwwreg, PureOp)).

%% State: an assign keeps a live entry with a greater key (it still wins).
lwwreg_keeps_greater_test() ->
    {_, B} = shared(lwwreg, state, [{assign, w, 9}]),
    {ok, B1, _} = hm_crdt:mutate({assign, x, 2}, b, B),
    ?assertEqual(w, hm_crdt:value(B1)),
    ?assertEqual(2, length(hm_dcc:dots(hm_crdt:lattice(B1)))),
    {ok, B2, _} = hm_crdt:mutate({assign, y, 10}, b, B1),
    ?assertEqual(y, hm_crdt:value(B2)),
    ?assertEqual(1, length(hm_dcc:dots(hm_crdt:lattice(B2)))).

%% reset/2 (the map's field removal): drops what the vector has seen, keeps the rest.
lwwreg_reset_test() ->
    S1 = hm_lwwreg:effect({assign, x, 5}, {a, 1}, #{a => 1}, hm_lwwreg:op_new()),
    S2 = hm_lwwreg:effect({assign, y, 1}, {b, 1}, #{b => 1}, S1),
    ?assertEqual(x, hm_lwwreg:op_value(S2)),
    ?assertEqual(y, hm_lwwreg:op_value(hm_lwwreg:reset(#{a => 1}, S2))),
    S3 = hm_lwwreg:stabilize(#{a => 1, b => 1}, S2),
    ?assertEqual({x, 0}, {hm_lwwreg:op_value(S3), hm_lwwreg:op_timestamps(S3)}),
    ?assertEqual(undefined, hm_lwwreg:op_value(hm_lwwreg:reset(#{a => 1}, S3))).

%%% ---------------------------------------------------------------- mvreg

mvreg_test_() ->
    [{atom_to_list(F),
      [?_assertEqual([], hm_crdt:value(hm_crdt:new(mvreg, F))),
       ?_assertEqual([y], value_after(mvreg, F, [{assign, x}, {assign, y}])),
       ?_assertEqual([x, y], converged(mvreg, F, [], {assign, x}, {assign, y})),
       ?_assertEqual([x, y], converged(mvreg, F, [{assign, z}], {assign, x}, {assign, y})),
       ?_assertEqual([x], converged(mvreg, F, [{assign, z}], {assign, x}, {assign, x})),
       %% an assign that has seen both concurrent values replaces them
       ?_test(begin
                  {A, _} = concurrent(hm_crdt:new(mvreg, F), {assign, x}, {assign, y}),
                  ?assertEqual([z], hm_crdt:value(local(A, a, [{assign, z}])))
              end)]}
     || F <- flavors()].

mvreg_reset_test() ->
    S1 = hm_mvreg:effect({assign, x}, {a, 1}, #{a => 1}, hm_mvreg:op_new()),
    S2 = hm_mvreg:effect({assign, y}, {b, 1}, #{b => 1}, S1),
    ?assertEqual([x, y], hm_mvreg:op_value(S2)),
    ?assertEqual([y], hm_mvreg:op_value(hm_mvreg:reset(#{a => 1}, S2))),
    S3 = hm_mvreg:stabilize(#{a => 1, b => 1}, S2),
    ?assertEqual({[x, y], 0}, {hm_mvreg:op_value(S3), hm_mvreg:op_timestamps(S3)}),
    ?assertEqual([], hm_mvreg:op_value(hm_mvreg:reset(#{}, S3))).

%%% ---------------------------------------------------------------- ewflag

ewflag_test_() ->
    [{atom_to_list(F),
      [?_assertEqual(false, hm_crdt:value(hm_crdt:new(ewflag, F))),
       ?_assertEqual(true, value_after(ewflag, F, [enable])),
       ?_assertEqual(false, value_after(ewflag, F, [disable])),
       ?_assertEqual(false, value_after(ewflag, F, [enable, disable])),
       ?_assertEqual(true, value_after(ewflag, F, [enable, disable, enable])),
       %% enable wins over a concurrent disable
       ?_assertEqual(true, converged(ewflag, F, [enable], enable, disable)),
       ?_assertEqual(true, converged(ewflag, F, [], disable, enable)),
       ?_assertEqual(false, converged(ewflag, F, [enable], disable, disable))]}
     || F <- flavors()].

ewflag_reset_test() ->
    S1 = hm_ewflag:effect(enable, {a, 1}, #{a => 1}, hm_ewflag:op_new()),
    S2 = hm_ewflag:effect(disable, {b, 1}, #{b => 1}, S1),
    ?assert(hm_ewflag:op_value(S2)),
    ?assertNot(hm_ewflag:op_value(hm_ewflag:reset(#{a => 1}, S2))),
    S3 = hm_ewflag:stabilize(#{a => 1, b => 1}, S2),
    ?assertEqual({true, 0}, {hm_ewflag:op_value(S3), hm_ewflag:op_timestamps(S3)}),
    ?assertNot(hm_ewflag:op_value(hm_ewflag:reset(#{}, S3))).

%%% ---------------------------------------------------------------- common

bad_op_test_() ->
    Bad = [{lwwreg, [assign, {assign}, {assign, x, -1}, {assign, x, 1.5}, {assign, x, y},
                     {set, x}, {assign, x, 1, 2}, enable]},
           {mvreg, [assign, {assign}, {assign, x, 1}, {set, x}, enable]},
           {ewflag, [{enable}, toggle, {assign, x}, true, "enable"]}],
    [?_assertEqual({error, {bad_op, T, Op}}, hm_crdt:mutate(Op, a, hm_crdt:new(T, F)))
     || {T, Ops} <- Bad, Op <- Ops, F <- flavors()].

%% Op flavor: once everything is delivered everywhere and stable, the PO-log is empty and the
%% value unchanged.
op_log_empties_test_() ->
    Cases = [{lwwreg, [{assign, x, 1}, {assign, y}], [{assign, z, 2}]},
             {mvreg, [{assign, x}, {assign, y}], [{assign, z}]},
             {ewflag, [enable, disable, enable], [disable]}],
    [{atom_to_list(T), fun() -> op_log_empties(T, OpsA, OpsB) end} || {T, OpsA, OpsB} <- Cases].

op_log_empties(T, OpsA, OpsB) ->
    {A, EsA} = run(a, hm_crdt:new(T, op), OpsA),
    {B, EsB} = run(b, hm_crdt:new(T, op), OpsB),
    A1 = lists:foldl(fun hm_crdt:deliver/2, A, EsB),
    B1 = lists:foldl(fun hm_crdt:deliver/2, B, EsA),
    ?assertEqual(hm_crdt:value(A1), hm_crdt:value(B1)),
    ?assert(hm_crdt:metadata(A1) > 0),
    V = hm_crdt:delivered(A1),
    ?assertEqual(V, hm_crdt:delivered(B1)),
    %% nothing is stable yet: nothing moves
    ?assertEqual(hm_crdt:metadata(A1), hm_crdt:metadata(hm_crdt:stable(#{}, A1))),
    [begin
         C1 = hm_crdt:stable(V, C),
         ?assertEqual(0, hm_crdt:metadata(C1)),
         ?assertEqual(hm_crdt:value(C), hm_crdt:value(C1))
     end || C <- [A1, B1]].

run(R, C, Ops) ->
    {C1, Es} = lists:foldl(fun(Op, {Acc, Es}) ->
                                   {ok, Acc1, E} = hm_crdt:mutate(Op, R, Acc),
                                   {Acc1, [E | Es]}
                           end, {C, []}, Ops),
    {C1, lists:reverse(Es)}.
