%% @doc Last-writer-wins register, in state, delta and pure op-based flavor (the ChiaVe paper
%% registers; Almeida et al., delta-state CRDTs; the Hypermnesia paper, §4.5–4.7 for the op flavor).
%%
%% Semantics: the value is the `V' of the assign with the greatest key `{Ts, Replica}'
%% (`Replica' is where the assign was issued); two assigns with the same key come from the same
%% replica, so one happened before the other, and the later one wins. `undefined' before any
%% assign. `{assign, V, Ts}' takes an explicit non-negative integer timestamp; `{assign, V}'
%% takes `max(erlang:system_time(microsecond), MaxTs + 1)' where `MaxTs' is the greatest
%% timestamp the replica holds, so an automatic assign beats everything its replica has seen.
%%
%% State and delta flavors: a dot fun `Dot => {Ts, V}'. An assign at `R' takes a fresh dot and
%% drops every live entry whose key `{Ts', R'}' is `=<' its own `{Ts, R}'; live entries with a
%% greater key stay (they win the value, and a map's `{remove, Key}' must not lose them). The
%% delta's context lists the new dot and the dropped ones.
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7): {@link prepare/3} fixes the timestamp, so the operation that
%% travels is always `{assign, V, Ts}'. The PO-log is `Dot => {Ts, V}'; `effect' drops the
%% entries that causally precede the operation and have a key `=<' its key (causal
%% redundancy), and the sequential winner if its key is `=<'; `stabilize', once every log
%% entry is causally stable, keeps only the winner, as the timestamp-free sequential state
%% `{Ts, Replica, V}' (`Ts' and `Replica' are payload there: they decide later comparisons).
%%
%% Invariants: no log entry has the key of the sequential winner (`stabilize' empties the log,
%% and a later assign with that key drops the winner), so keys plus dot counters order every
%% entry and the winner is unique.
-module(hm_lwwreg).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

-type ts() :: non_neg_integer().
%% Sequential winner (stable) and PO-log (dot => timestamped value).
-type op_state() :: {none | {ts(), hm_vv:replica(), term()}, #{hm_vv:dot() => {ts(), term()}}}.

%% @doc `{assign, V}' or `{assign, V, Ts}' with `Ts' a non-negative integer.
-spec is_op(term()) -> boolean().
is_op({assign, _}) -> true;
is_op({assign, _, Ts}) -> is_integer(Ts) andalso Ts >= 0;
is_op(_) -> false.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> #{}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Op, R, {F, Ctx}) ->
    {Ts, V} = stamp(Op, maps:values(F)),
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {(maps:without(superseded({Ts, R}, F), F))#{Dot => {Ts, V}}, Ctx1}.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, {F, Ctx}) ->
    {Ts, V} = stamp(Op, maps:values(F)),
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => {Ts, V}}, hm_node_clock:from_dots([Dot | superseded({Ts, R}, F)])}.

%% @doc The winning value, `undefined' when nothing was assigned.
-spec value(hm_dcc:store()) -> term().
value(F) -> winner(entries(F)).

%% The live dots an assign with key `Key' makes redundant.
superseded(Key, F) -> [D || {D = {R, _}, {Ts, _}} <- maps:to_list(F), {Ts, R} =< Key].

%% The timestamp and value of an assign; `Held' are the `{Ts, V}' the replica holds.
stamp({assign, V, Ts}, _Held) -> {Ts, V};
stamp({assign, V}, Held) ->
    MaxTs = lists:max([-1 | [Ts || {Ts, _} <- Held]]),
    {max(erlang:system_time(microsecond), MaxTs + 1), V}.

%% `{Ts, Replica, Counter, V}': the order of the first three is the order of the assigns.
entries(F) -> [{Ts, R, C, V} || {{R, C}, {Ts, V}} <- maps:to_list(F)].

winner([]) -> undefined;
winner(Es) -> element(4, lists:max(Es)).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {none, #{}}.

%% @doc Fix the timestamp of `{assign, V}' (beating every timestamp held); the pure operation
%% is always `{assign, V, Ts}'.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare({assign, V}, _R, S) ->
    {Ts, V} = stamp({assign, V}, [{T, X} || {T, _, _, X} <- op_entries(S)]),
    {assign, V, Ts};
prepare(Op, _R, _S) -> Op.

%% @doc effect with causal redundancy: an assign makes redundant the entries it has seen whose
%% key is not greater than its own (and the stable winner, under the same condition).
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect({assign, V, Ts}, Dot = {R, _}, Vec, {Seq, Log}) ->
    Key = {Ts, R},
    Live = maps:filter(fun(D = {R1, _}, {Ts1, _}) ->
                               not (hm_vv:contains(D, Vec) andalso {Ts1, R1} =< Key)
                       end, Log),
    Seq1 = case Seq of
               {STs, SR, _} when {STs, SR} =< Key -> none;
               _ -> Seq
           end,
    {Seq1, Live#{Dot => {Ts, V}}}.

%% @doc Causal stability (the Hypermnesia paper, §4.7): once every log entry is stable, only the winner is
%% kept, without its dot.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S = {_, Log}) when map_size(Log) > 0 ->
    case hm_polog:all_stable(Log, V) of
        true ->
            {Ts, R, _, X} = lists:max(op_entries(S)),
            {{Ts, R, X}, #{}};
        false -> S
    end;
stabilize(_V, S) -> S.

%% @doc Drop whatever causally precedes `Ts' (the stable winner, older log entries).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) ->
    {none, hm_polog:concurrent(Log, Ts)}.

-spec op_value(op_state()) -> term().
op_value(S) -> winner(op_entries(S)).

%% The stable winner as an entry with counter 0 (no log entry shares its key, see above).
op_entries({none, Log}) -> entries(Log);
op_entries({{Ts, R, V}, Log}) -> [{Ts, R, 0, V} | entries(Log)].

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
