%% @doc Remove-wins set, in state, delta and pure op-based flavor.
%%
%% Semantics: among the operations that name `E', take the causally maximal ones; `E' is in
%% the set iff they include an add and no remove. An add concurrent with a remove loses; an
%% add causally after a remove wins.
%%
%% State and delta flavors (Almeida et al., delta-state RWSet): a dot map
%% `E => #{Dot => add | rmv}'. Both an add and a remove put a fresh dot under `E', tagged with
%% the kind, and drop the dots of `E' they saw (a remove must leave a dot, or it could not beat
%% an add it has not seen). The live dots of `E' are so exactly the causally maximal operations
%% naming `E'; `E' is shown iff they hold an `add' and no `rmv'. There is no stability in
%% these flavors: a removed element keeps its remove dot until a later add or remove
%% supersedes it.
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.8, the remove-wins variant, "mostly similar" to Algorithm 2): the
%% PO-log keeps, per element, the adds and removes not made redundant; `effect' applies the
%% redundancy relation R (an add or remove of `E' makes every causally older entry of `E'
%% redundant) and stores the new entry, whatever its kind; `stabilize' takes an element whose
%% entries are all causally stable out of the log, into the timestamp-free sequential set iff
%% they hold an add and no remove (so a removed element leaves nothing behind). An element
%% with a stable remove and a concurrent unstable add stays in the log, where the remove keeps
%% winning. `add_all'/`remove_all' are one operation: one timestamp in the op flavor, one dot
%% per element in the others.
%%
%% Invariants: an element is in at most one of the sequential set and the PO-log's keys; no
%% empty dot fun is stored.
-module(hm_rwset).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

-type elem() :: term().
-type kind() :: add | rmv.
%% Sequential part (stable present elements) and PO-log (element => live entries).
-type op_state() :: {#{elem() => true}, #{elem() => #{hm_vv:dot() => kind()}}}.

%% @doc `{add, E}', `{remove, E}', `{add_all, Es}', `{remove_all, Es}' (`Es' a proper list).
-spec is_op(term()) -> boolean().
is_op(Op) -> hm_awset:is_op(Op).                 % the same operations as the add-wins set

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> {dm, #{}}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Op, R, {{dm, M}, Ctx}) ->
    {Kind, Es} = split(Op),
    %% a fresh dot per element, replacing the element's live dots
    lists:foldl(fun(E, {{dm, Acc}, C}) ->
                        {Dot, C1} = hm_node_clock:next_dot(R, C),
                        {{dm, Acc#{E => #{Dot => Kind}}}, C1}
                end, {{dm, M}, Ctx}, Es).

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, {{dm, M}, Ctx}) ->
    {Kind, Es} = split(Op),
    Seen = [D || E <- Es, D <- maps:keys(maps:get(E, M, #{}))],
    {Store, New} = lists:foldl(fun(E, {Acc, C}) ->
                                       {Dot, C1} = hm_node_clock:next_dot(R, C),
                                       {Acc#{E => #{Dot => Kind}}, C1}
                               end, {#{}, Ctx}, Es),
    NewDots = hm_node_clock:missing(New, Ctx),
    {{dm, Store}, hm_node_clock:from_dots(NewDots ++ Seen)}.

%% @doc The elements whose live dots hold an add and no remove, as an ordset.
-spec value(hm_dcc:store()) -> ordsets:ordset(elem()).
value({dm, M}) -> lists:sort([E || {E, Dots} <- maps:to_list(M), present(Dots)]).

present(Entries) ->
    Kinds = maps:values(Entries),
    lists:member(add, Kinds) andalso not lists:member(rmv, Kinds).

split({add, E}) -> {add, [E]};
split({add_all, Es}) -> {add, lists:usort(Es)};
split({remove, E}) -> {rmv, [E]};
split({remove_all, Es}) -> {rmv, lists:usort(Es)}.

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {#{}, #{}}.

%% @doc prepare(o, s) = o: a pure op-based set sends the operation as it is.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc effect with causal redundancy: prune older entries of each element the operation
%% names (stable ones, in the sequential set, are older too), then store the operation.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect(Op, Dot, Ts, {Seq, Log}) ->
    {Kind, Es} = split(Op),
    lists:foldl(fun(E, {Seq1, Log1}) ->
                        Live = hm_polog:concurrent(maps:get(E, Log1, #{}), Ts),
                        {maps:remove(E, Seq1), Log1#{E => Live#{Dot => Kind}}}
                end, {Seq, Log}, Es).



%% @doc Causal stability (the Hypermnesia paper, §4.7): an element whose entries are all stable leaves the
%% log; it joins the sequential set iff they hold an add and no remove.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S) -> hm_polog:stabilize_groups(V, S, fun present/1).

%% @doc Drop whatever causally precedes `Ts' (all stable elements, older log entries).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) ->
    {#{}, hm_polog:reset_groups(Ts, Log)}.

-spec op_value(op_state()) -> ordsets:ordset(elem()).
op_value({Seq, Log}) ->
    lists:usort(maps:keys(Seq) ++ [E || {E, Entries} <- maps:to_list(Log), present(Entries)]).

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> hm_polog:group_timestamps(Log).
