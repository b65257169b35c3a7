%% @doc The counter core shared by {@link hm_gcounter} and {@link hm_pncounter}: a resettable
%% causal counter over `{P, N}' pairs (increments, decrements), in all three flavors.
%%
%% State and delta flavors (Almeida et al., delta-state "causal counter", made resettable):
%% a dot fun holding two kinds of entries.
%% <ul>
%% <li>`Dot => {P, N}': the running total of the dot's replica. An operation at `R' takes a
%% fresh dot holding `R''s total plus the amount and supersedes `R''s older total. Totals are
%% cumulative: they never restart, even after a reset.</li>
%% <li>`Dot => {reset, R, {P, N}}': an offset, written by a reset (a map's `{remove, Key}' on
%% this counter), saying "`R''s count up to this total was removed".</li>
%% </ul>
%% Value: the sum over replicas `R' of `max(T_R, O_R) - O_R' (pointwise on P and N), `T_R' the
%% replica's live total, `O_R' the greatest offset for it. A reset supersedes every entry it
%% saw and writes, for each replica, an offset equal to what it saw; concurrent resets keep
%% both offsets and the maximum counts, so nothing is subtracted twice; an increment concurrent
%% with a reset survives, and only it. This is exactly reset-remove: the value counts the
%% operations no reset causally follows. Without resets it is the plain causal counter (one
%% live dot per replica).
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7): the PO-log `Dot => Amount' (signed) and a sequential
%% integer. A counter operation is never causally redundant, so `effect' only records it;
%% `stabilize' adds causally stable entries to the sequential integer; `reset' zeroes the
%% sequential part and drops the entries the reset has seen.
%%
%% Invariants: at most one live total per replica; a replica's totals only grow.
-module(hm_ccounter).

-export([update/3, delta/3, value/1, reset_update/2, reset_delta/2]).
-export([op_new/0, effect/2, stabilize/2, reset/2, op_value/1, op_timestamps/1]).
-export_type([amount/0, op_state/0]).

%% Increments and decrements of one operation, or of a running total.
-type amount() :: {non_neg_integer(), non_neg_integer()}.
-type op_state() :: {integer(), #{hm_vv:dot() => integer()}}.

%%% ------------------------------------------------------------- state and delta

%% @doc Full-state mutator: add `Amount' to `R''s running total.
-spec update(amount(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Amount, R, {F, Ctx}) ->
    {Mine, Total} = base(R, F),
    {Dot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {(maps:without(Mine, F))#{Dot => add(Total, Amount)}, Ctx1}.

%% @doc Delta mutator: the new total, superseding `R''s older one.
-spec delta(amount(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Amount, R, {F, Ctx}) ->
    {Mine, Total} = base(R, F),
    {Dot, _} = hm_node_clock:next_dot(R, Ctx),
    {#{Dot => add(Total, Amount)}, hm_node_clock:from_dots([Dot | Mine])}.

%% R's live total dots, and the total to continue from: the greater of its live total and
%% the offset of a reset (totals never restart).
base(R, F) ->
    maps:fold(fun({R1, _} = D, {P, N}, {Ds, T}) when R1 =:= R -> {[D | Ds], max2(T, {P, N})};
                 (_, {reset, R1, O}, {Ds, T}) when R1 =:= R -> {Ds, max2(T, O)};
                 (_, _, Acc) -> Acc
              end, {[], {0, 0}}, F).

%% @doc `{Increments, Decrements}' the store counts.
-spec value(hm_dcc:store()) -> amount().
value(F) when is_map(F) ->
    {Totals, Offsets} = per_replica(F),
    maps:fold(fun(R, T, Acc) ->
                      O = maps:get(R, Offsets, {0, 0}),
                      add(Acc, sub(max2(T, O), O))
              end, {0, 0}, Totals).

%% Replica => greatest live total, Replica => greatest offset.
per_replica(F) ->
    maps:fold(fun(_, {reset, R, O}, {Ts, Os}) -> {Ts, Os#{R => max2(maps:get(R, Os, O), O)}};
                 ({R, _}, T, {Ts, Os}) -> {Ts#{R => max2(maps:get(R, Ts, T), T)}, Os}
              end, {#{}, #{}}, F).

%% @doc Reset at replica `R' (full-state): supersede every entry, keep one offset per replica.
-spec reset_update(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_update(R, {F, Ctx}) -> offsets(R, F, Ctx).

%% @doc Reset at replica `R' (delta): the offsets, superseding every entry seen.
-spec reset_delta(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_delta(R, {F, Ctx}) ->
    {Offsets, _} = offsets(R, F, Ctx),
    {Offsets, hm_node_clock:from_dots(maps:keys(Offsets) ++ maps:keys(F))}.

offsets(R, F, Ctx) ->
    {Totals, Os} = per_replica(F),
    Seen = maps:fold(fun(X, O, Acc) -> Acc#{X => max2(maps:get(X, Acc, O), O)} end, Totals, Os),
    lists:foldl(fun({X, O}, {Acc, C}) ->
                        {Dot, C1} = hm_node_clock:next_dot(R, C),
                        {Acc#{Dot => {reset, X, O}}, C1}
                end, {#{}, Ctx}, lists:sort([XO || XO = {_, O} <- maps:to_list(Seen),
                                                   O =/= {0, 0}])).

add({P1, N1}, {P2, N2}) -> {P1 + P2, N1 + N2}.
sub({P1, N1}, {P2, N2}) -> {P1 - P2, N1 - N2}.
max2({P1, N1}, {P2, N2}) -> {max(P1, P2), max(N1, N2)}.

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {0, #{}}.

%% @doc Record an operation's signed amount under its dot: nothing is ever redundant.
-spec effect({hm_vv:dot(), integer()}, op_state()) -> op_state().
effect({Dot, Amount}, {Seq, Log}) -> {Seq, Log#{Dot => Amount}}.

%% @doc Causal stability (the Hypermnesia paper, §4.7): stable entries join the sequential integer.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, {Seq, Log}) ->
    maps:fold(fun(D, N, {S, L}) ->
                      case hm_vv:contains(D, V) of
                          true -> {S + N, L};
                          false -> {S, L#{D => N}}
                      end
              end, {Seq, #{}}, Log).

%% @doc Drop whatever causally precedes `Ts': the sequential part, the entries it has seen.
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) -> {0, hm_polog:concurrent(Log, Ts)}.

-spec op_value(op_state()) -> integer().
op_value({Seq, Log}) -> Seq + lists:sum(maps:values(Log)).

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> map_size(Log).
