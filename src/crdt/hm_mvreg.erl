%% @doc Multi-value register, in state, delta and pure op-based flavor (the ChiaVe paper
%% registers; Almeida et al., delta-state MVRegister; the Hypermnesia paper, §4.5–4.7 for the op flavor).
%%
%% Semantics: the value is the ordset of the values of the assigns not causally followed by
%% another assign: concurrent assigns all show, the next assign that has seen them replaces
%% them all. `[]' before any assign.
%%
%% State and delta flavors (Almeida et al., MVRegister): a dot fun `Dot => V'. An assign takes
%% a fresh dot and drops every live dot; the delta's context lists the new dot and the dropped
%% ones.
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7): the PO-log is `Dot => V'; `effect' drops every entry that
%% causally precedes the assign and the whole sequential part (stable, so it precedes too);
%% `stabilize', once every log entry is causally stable, makes their values the timestamp-free
%% sequential part and empties the log.
%%
%% Invariants: the sequential part and the PO-log are never both non-empty (an effect clears
%% the first, a stabilization empties the second).
-module(hm_mvreg).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

%% Sequential part (stable values) and PO-log (dot => value).
-type op_state() :: {ordsets:ordset(term()), #{hm_vv:dot() => term()}}.

%% @doc `{assign, V}'.
-spec is_op(term()) -> boolean().
is_op({assign, _}) -> true;
is_op(_) -> false.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> #{}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update({assign, V}, R, {_F, Ctx}) ->
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => V}, Ctx1}.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta({assign, V}, R, {F, Ctx}) ->
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => V}, hm_node_clock:from_dots([Dot | maps:keys(F)])}.

%% @doc The values of the concurrent latest assigns, as an ordset.
-spec value(hm_dcc:store()) -> ordsets:ordset(term()).
value(F) -> lists:usort(maps:values(F)).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {[], #{}}.

%% @doc prepare(o, s) = o.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc effect with causal redundancy: an assign makes every entry it has seen redundant.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect({assign, V}, Dot, Ts, {_Seq, Log}) ->
    {[], (hm_polog:concurrent(Log, Ts))#{Dot => V}}.


%% @doc Causal stability (the Hypermnesia paper, §4.7): once every log entry is stable, their values become
%% the sequential part.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S = {_, Log}) when map_size(Log) > 0 ->
    case hm_polog:all_stable(Log, V) of
        true -> {lists:usort(maps:values(Log)), #{}};
        false -> S
    end;
stabilize(_V, S) -> S.

%% @doc Drop whatever causally precedes `Ts' (the sequential part, older log entries).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) -> {[], hm_polog:concurrent(Log, Ts)}.

-spec op_value(op_state()) -> ordsets:ordset(term()).
op_value({Seq, Log}) -> lists:usort(Seq ++ maps:values(Log)).

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
