%% @doc Positive-negative counter, in state, delta and pure op-based flavor (seed 001 ChiaVe
%% §3–4: counters in op, state and delta flavor behind one interface).
%%
%% Semantics: the value is the sum of every increment minus the sum of every decrement in the
%% history; operations commute, so concurrent ones simply add up.
%%
%% State and delta flavors (Almeida et al., delta-state "causal counter"): a dot fun
%% `Dot => {P, N}' with at most one live dot per replica, holding that replica's accumulated
%% increments `P' and decrements `N'. A mutation at `R' takes a fresh dot, stores under it the
%% pointwise sum of `R''s live dots plus the operation's amount and drops those live dots; the
%% delta is the new entry with a context of the new dot and the dots it supersedes. Dots rather
%% than a plain `R => {P, N}' map let a map reset an embedded counter on `{remove, Key}': a
%% remove drops the dots it has seen.
%%
%% Op flavor (seed 000 §4.5–4.7): the PO-log `Dot => Amount', `Amount' a signed integer
%% (positive for an increment, negative for a decrement), and a sequential integer. No
%% operation is ever causally redundant, so `effect' only records it; `stabilize' adds every
%% causally stable entry to the sequential integer; `reset' zeroes it and drops the entries the
%% remove has seen.
%%
%% Invariants: at most one live dot per replica in the store (every mutator supersedes all of
%% `R''s live dots, to be defensive); `P' and `N' never decrease for a replica; the value is
%% the sum of `P - N' over the store, or the sequential integer plus the sum of the PO-log.
-module(hm_pncounter).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

%% Sequential part (stable operations) and PO-log (dot => signed amount of that operation).
-type op_state() :: {integer(), #{hm_vv:dot() => integer()}}.

%% @doc `increment', `decrement' (by one), `{increment, N}', `{decrement, N}' with `N' a
%% non-negative integer.
-spec is_op(term()) -> boolean().
is_op(increment) -> true;
is_op(decrement) -> true;
is_op({increment, N}) -> is_integer(N) andalso N >= 0;
is_op({decrement, N}) -> is_integer(N) andalso N >= 0;
is_op(_) -> false.

%% The operation as {Increments, Decrements}.
amount(increment) -> {1, 0};
amount(decrement) -> {0, 1};
amount({increment, N}) -> {N, 0};
amount({decrement, N}) -> {0, N}.

signed(Op) ->
    {P, N} = amount(Op),
    P - N.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> #{}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Op, R, {F, Ctx}) ->
    {Mine, PN} = live(R, F),
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {(maps:without(Mine, F))#{Dot => add(PN, amount(Op))}, Ctx1}.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, {F, Ctx}) ->
    {Mine, PN} = live(R, F),
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => add(PN, amount(Op))}, hm_node_clock:from_dots([Dot | Mine])}.

%% R's live dots and the pointwise sum of their {P, N}.
live(R, F) ->
    maps:fold(fun({R1, _} = D, PN, {Ds, Acc}) when R1 =:= R -> {[D | Ds], add(Acc, PN)};
                 (_, _, Acc) -> Acc
              end, {[], {0, 0}}, F).

add({P1, N1}, {P2, N2}) -> {P1 + P2, N1 + N2}.

%% @doc Increments minus decrements over the live dots.
-spec value(hm_dcc:store()) -> integer().
value(F) -> maps:fold(fun(_, {P, N}, Acc) -> Acc + P - N end, 0, F).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {0, #{}}.

%% @doc prepare(o, s) = o: the operation travels as it is.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc An operation is never redundant and makes nothing redundant: record its signed amount.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect(Op, Dot, _Ts, {Seq, Log}) -> {Seq, Log#{Dot => signed(Op)}}.

%% @doc Causal stability (seed 000 §4.7): stable operations join the sequential integer.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, {Seq, Log}) ->
    maps:fold(fun(D, N, {S, L}) ->
                      case hm_vv:contains(D, V) of
                          true -> {S + N, L};
                          false -> {S, L#{D => N}}
                      end
              end, {Seq, #{}}, Log).

%% @doc Drop whatever causally precedes `Ts' (the sequential part, older operations).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) -> {0, maps:filter(fun(D, _) -> not hm_vv:contains(D, Ts) end, Log)}.

-spec op_value(op_state()) -> integer().
op_value({Seq, Log}) -> Seq + lists:sum(maps:values(Log)).

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
