%% @doc Grow-only counter, in state, delta and pure op-based flavor (seed 001 ChiaVe §3–4:
%% counters in op, state and delta flavor behind one interface).
%%
%% Semantics: the value is the sum of every increment in the history; increments commute, so
%% concurrent ones simply add up.
%%
%% State and delta flavors (Almeida et al., delta-state "causal counter"): a dot fun
%% `Dot => Count' with at most one live dot per replica, holding that replica's running total.
%% An increment at `R' takes a fresh dot, stores under it the sum of `R''s live dots plus the
%% amount and drops those live dots; the delta is the new entry with a context of the new dot
%% and the dots it supersedes. Only `R' writes `R''s dots, so the newest one always carries
%% the others' counts. Dots rather than a plain `R => Count' map let a map reset an embedded
%% counter on `{remove, Key}': a remove drops the dots it has seen.
%%
%% Op flavor (seed 000 §4.5–4.7): the PO-log `Dot => Amount' and a sequential integer. No
%% increment is ever causally redundant, so `effect' only records it; `stabilize' adds every
%% causally stable entry to the sequential integer; `reset' zeroes it and drops the entries the
%% remove has seen.
%%
%% Invariants: at most one live dot per replica in the store (every mutator supersedes all of
%% `R''s live dots, to be defensive); the value is the sum over the store, or the sequential
%% integer plus the sum of the PO-log.
-module(hm_gcounter).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

%% Sequential part (stable increments) and PO-log (dot => amount of that increment).
-type op_state() :: {non_neg_integer(), #{hm_vv:dot() => non_neg_integer()}}.

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
update(Op, R, {F, Ctx}) ->
    {Mine, Sum} = live(R, F),
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {(maps:without(Mine, F))#{Dot => Sum + amount(Op)}, Ctx1}.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, {F, Ctx}) ->
    {Mine, Sum} = live(R, F),
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => Sum + amount(Op)}, hm_node_clock:from_dots([Dot | Mine])}.

%% R's live dots and the sum of their counts.
live(R, F) ->
    maps:fold(fun({R1, _} = D, N, {Ds, S}) when R1 =:= R -> {[D | Ds], S + N};
                 (_, _, Acc) -> Acc
              end, {[], 0}, F).

%% @doc The sum of the live counts.
-spec value(hm_dcc:store()) -> non_neg_integer().
value(F) -> lists:sum(maps:values(F)).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {0, #{}}.

%% @doc prepare(o, s) = o: the operation travels as it is.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc An increment is never redundant and makes nothing redundant: record it.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect(Op, Dot, _Ts, {Seq, Log}) -> {Seq, Log#{Dot => amount(Op)}}.

%% @doc Causal stability (seed 000 §4.7): stable increments join the sequential integer.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, {Seq, Log}) ->
    maps:fold(fun(D, N, {S, L}) ->
                      case hm_vv:contains(D, V) of
                          true -> {S + N, L};
                          false -> {S, L#{D => N}}
                      end
              end, {Seq, #{}}, Log).

%% @doc Drop whatever causally precedes `Ts' (the sequential part, older increments).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) -> {0, maps:filter(fun(D, _) -> not hm_vv:contains(D, Ts) end, Log)}.

-spec op_value(op_state()) -> non_neg_integer().
op_value({Seq, Log}) -> Seq + lists:sum(maps:values(Log)).

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
