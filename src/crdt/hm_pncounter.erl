%% @doc Positive-negative counter, in state, delta and pure op-based flavor (the ChiaVe paper
%% §3–4: counters in op, state and delta flavor behind one interface).
%%
%% Semantics: the value is the sum of every increment minus the sum of every decrement in the
%% history; operations commute, so concurrent ones simply add up. Embedded in a map,
%% `{remove, Key}' resets it: the value then counts the operations no remove causally follows.
%%
%% All three flavors are the shared counter core {@link hm_ccounter} (a resettable causal
%% counter: one running total per replica under one dot, offsets written by resets; in the op
%% flavor a PO-log of signed amounts folded into an integer at stability).
-module(hm_pncounter).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1, reset_update/2, reset_delta/2]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

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
update(Op, R, Dcc) -> hm_ccounter:update(amount(Op), R, Dcc).

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, Dcc) -> hm_ccounter:delta(amount(Op), R, Dcc).

%% @doc Increments minus decrements counted.
-spec value(hm_dcc:store()) -> integer().
value(F) ->
    {P, N} = hm_ccounter:value(F),
    P - N.

-spec reset_update(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_update(R, Dcc) -> hm_ccounter:reset_update(R, Dcc).

-spec reset_delta(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_delta(R, Dcc) -> hm_ccounter:reset_delta(R, Dcc).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> hm_ccounter:op_state().
op_new() -> hm_ccounter:op_new().

%% @doc prepare(o, s) = o: the operation travels as it is.
-spec prepare(term(), hm_vv:replica(), hm_ccounter:op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc A counter operation is never redundant and makes nothing redundant: record it.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
effect(Op, Dot, _Ts, S) -> hm_ccounter:effect({Dot, signed(Op)}, S).

-spec stabilize(hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
stabilize(V, S) -> hm_ccounter:stabilize(V, S).

-spec reset(hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
reset(Ts, S) -> hm_ccounter:reset(Ts, S).

-spec op_value(hm_ccounter:op_state()) -> integer().
op_value(S) -> hm_ccounter:op_value(S).

-spec op_timestamps(hm_ccounter:op_state()) -> non_neg_integer().
op_timestamps(S) -> hm_ccounter:op_timestamps(S).
