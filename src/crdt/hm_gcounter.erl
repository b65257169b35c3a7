%% @doc Grow-only counter, in state, delta and pure op-based flavor (the ChiaVe paper §3–4:
%% counters in op, state and delta flavor behind one interface).
%%
%% Semantics: the value is the sum of every increment in the history; increments commute, so
%% concurrent ones simply add up. Embedded in a map, `{remove, Key}' resets it: the value then
%% counts the increments no remove causally follows.
%%
%% All three flavors are the shared counter core {@link hm_ccounter} (a resettable causal
%% counter: one running total per replica under one dot, offsets written by resets; in the op
%% flavor a PO-log of amounts folded into an integer at stability) with no decrements.
-module(hm_gcounter).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1, reset_update/2, reset_delta/2]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

%% @doc `increment' (by one) and `{increment, N}' with `N' a non-negative integer.
-spec is_op(term()) -> boolean().
is_op(increment) -> true;
is_op({increment, N}) -> is_integer(N) andalso N >= 0;
is_op(_) -> false.

amount(increment) -> 1;
amount({increment, N}) -> N.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> #{}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Op, R, Dcc) -> hm_ccounter:update({amount(Op), 0}, R, Dcc).

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, Dcc) -> hm_ccounter:delta({amount(Op), 0}, R, Dcc).

%% @doc The number of increments counted.
-spec value(hm_dcc:store()) -> non_neg_integer().
value(F) -> element(1, hm_ccounter:value(F)).

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

%% @doc An increment is never redundant and makes nothing redundant: record it.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
effect(Op, Dot, _Ts, S) -> hm_ccounter:effect({Dot, amount(Op)}, S).

-spec stabilize(hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
stabilize(V, S) -> hm_ccounter:stabilize(V, S).

-spec reset(hm_vv:vv(), hm_ccounter:op_state()) -> hm_ccounter:op_state().
reset(Ts, S) -> hm_ccounter:reset(Ts, S).

-spec op_value(hm_ccounter:op_state()) -> integer().
op_value(S) -> hm_ccounter:op_value(S).

-spec op_timestamps(hm_ccounter:op_state()) -> non_neg_integer().
op_timestamps(S) -> hm_ccounter:op_timestamps(S).
