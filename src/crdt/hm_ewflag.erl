%% @doc Enable-wins flag, in state, delta and pure op-based flavor (the ChiaVe paper; Almeida et
%% al., delta-state EWFlag; the Hypermnesia paper, §4.5–4.7 for the op flavor).
%%
%% Semantics: `true' iff the causally maximal flag operations include an `enable': a
%% `disable' only cancels the enables it has seen, so an enable concurrent with a disable
%% wins. `false' when new.
%%
%% State and delta flavors (Almeida et al., EWFlag): a dot set (a dot fun to `true'). `enable'
%% takes a fresh dot and drops every live one; `disable' drops every live dot (its delta is the
%% empty store with those dots as context).
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7): the PO-log holds the dots of the enables not made redundant;
%% `effect' prunes the entries the operation has seen and clears the sequential flag (stable,
%% so seen too), then stores an enable; a disable is redundant once it has pruned, so it is
%% never stored. `stabilize', once every log entry is causally stable, sets the timestamp-free
%% sequential flag and empties the log.
%%
%% Invariants: the sequential flag is `true' only when the PO-log is empty (an effect clears
%% it, a stabilization empties the log).
-module(hm_ewflag).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

%% Sequential flag (stable enable) and PO-log (dots of live enables).
-type op_state() :: {boolean(), #{hm_vv:dot() => true}}.

%% @doc `enable' or `disable'.
-spec is_op(term()) -> boolean().
is_op(enable) -> true;
is_op(disable) -> true;
is_op(_) -> false.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> #{}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(enable, R, {_F, Ctx}) ->
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => true}, Ctx1};
update(disable, _R, {_F, Ctx}) ->
    {#{}, Ctx}.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(enable, R, {F, Ctx}) ->
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => true}, hm_node_clock:from_dots([Dot | maps:keys(F)])};
delta(disable, _R, {F, _Ctx}) ->
    {#{}, hm_node_clock:from_dots(maps:keys(F))}.

%% @doc Whether the flag is enabled.
-spec value(hm_dcc:store()) -> boolean().
value(F) -> map_size(F) > 0.

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {false, #{}}.

%% @doc prepare(o, s) = o.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc effect with causal redundancy: both operations make every entry they have seen
%% redundant; only an enable is kept.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect(enable, Dot, Ts, {_Seq, Log}) -> {false, (hm_polog:concurrent(Log, Ts))#{Dot => true}};
effect(disable, _Dot, Ts, {_Seq, Log}) -> {false, hm_polog:concurrent(Log, Ts)}.


%% @doc Causal stability (the Hypermnesia paper, §4.7): once every enable in the log is stable, the flag is
%% sequentially `true'.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S = {_, Log}) when map_size(Log) > 0 ->
    case hm_polog:all_stable(Log, V) of
        true -> {true, #{}};
        false -> S
    end;
stabilize(_V, S) -> S.

%% @doc Drop whatever causally precedes `Ts' (the sequential flag, older enables).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) -> {false, hm_polog:concurrent(Log, Ts)}.

-spec op_value(op_state()) -> boolean().
op_value({Seq, Log}) -> Seq orelse map_size(Log) > 0.

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
