%% @doc Add-wins set (observed-remove set), in state, delta and pure op-based flavor.
%%
%% Semantics: `E' is in the set iff some add of `E' is not causally followed by a remove of
%% `E'. A remove only removes the adds it has seen, so an add concurrent with a remove wins.
%%
%% State and delta flavors (Almeida et al., delta-state AWSet): a dot map `E => DotSet'. An add
%% puts a fresh dot under `E' and drops the dots of `E' it saw; a remove drops them. The
%% context remembers every dot seen, so a dropped dot never comes back.
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7, Listing 9 and Algorithm 2): the PO-log keeps, per element, the
%% dots of adds not made redundant; `effect' applies the redundancy relation R (an add or remove
%% of `E' makes every causally older entry of `E' redundant; a remove is itself redundant, so it
%% is never stored); `stabilize' moves an element whose entries are all causally stable into the
%% timestamp-free sequential set. `add_all'/`remove_all' are one operation: one timestamp in
%% the op flavor, one dot per element in the others.
%%
%% Invariants: an element is in at most one of the sequential set and the PO-log's keys after
%% an effect; no empty dot set is stored.
-module(hm_awset).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1, unsorted_value/1]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1,
         op_unsorted_value/1, op_has_timestamps/1, op_groups/1, stabilize_some/3]).

-type elem() :: term().
%% Sequential part (stable elements) and PO-log (element => dots of live adds).
-type op_state() :: {#{elem() => true}, #{elem() => #{hm_vv:dot() => true}}}.

%% @doc `{add, E}', `{remove, E}', `{add_all, Es}', `{remove_all, Es}'.
-spec is_op(term()) -> boolean().
is_op({add, _}) -> true;
is_op({remove, _}) -> true;
is_op({add_all, Es}) when length(Es) >= 0 -> true;      % proper lists only
is_op({remove_all, Es}) when length(Es) >= 0 -> true;
is_op(_) -> false.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> {dm, #{}}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update(Op, R, {{dm, M}, Ctx}) ->
    case split(Op) of
        {add, Es} ->
            %% a fresh dot per element: a dot lives under one key only
            lists:foldl(fun(E, {{dm, Acc}, C}) ->
                                {Dot, C1} = hm_node_clock:next_dot(R, C),
                                {{dm, Acc#{E => #{Dot => true}}}, C1}
                        end, {{dm, M}, Ctx}, Es);
        {remove, Es} ->
            {{dm, maps:without(Es, M)}, Ctx}
    end.

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta(Op, R, {{dm, M}, Ctx}) ->
    Seen = [D || E <- elems(Op), D <- maps:keys(maps:get(E, M, #{}))],
    case split(Op) of
        {add, Es} ->
            {Store, New} = lists:foldl(
                             fun(E, {Acc, C}) ->
                                     {Dot, C1} = hm_node_clock:next_dot(R, C),
                                     {Acc#{E => #{Dot => true}}, C1}
                             end, {#{}, Ctx}, Es),
            NewDots = hm_node_clock:missing(New, Ctx),
            {{dm, Store}, hm_node_clock:from_dots(NewDots ++ Seen)};
        {remove, Es} ->
            {{dm, maps:from_list([{E, #{}} || E <- Es])}, hm_node_clock:from_dots(Seen)}
    end.

%% @doc The elements, as an ordset.
-spec value(hm_dcc:store()) -> ordsets:ordset(elem()).
value({dm, M}) -> lists:sort(maps:keys(M)).

%% @doc The elements, unsorted.
-spec unsorted_value(hm_dcc:store()) -> [elem()].
unsorted_value({dm, M}) -> maps:keys(M).

split({add, E}) -> {add, [E]};
split({add_all, Es}) -> {add, lists:usort(Es)};
split({remove, E}) -> {remove, [E]};
split({remove_all, Es}) -> {remove, lists:usort(Es)}.

elems(Op) -> element(2, split(Op)).

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> {#{}, #{}}.

%% @doc prepare(o, s) = o: a pure op-based set sends the operation as it is.
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare(Op, _R, _S) -> Op.

%% @doc effect with causal redundancy (Listing 9): prune older entries of each element the
%% operation names, then keep the operation only if it is an add.
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect(Op, Dot, Ts, {Seq, Log}) ->
    {Kind, Es} = split(Op),
    lists:foldl(fun(E, {Seq1, Log1}) ->
                        Live = hm_polog:concurrent(maps:get(E, Log1, #{}), Ts),
                        Live1 = case Kind of
                                    add -> Live#{Dot => true};
                                    remove -> Live
                                end,
                        {maps:remove(E, Seq1), hm_polog:put_group(E, Live1, Log1)}
                end, {Seq, Log}, Es).



%% @doc Causal stability (the Hypermnesia paper, §4.7): an element whose entries are all stable joins the
%% sequential set and loses its timestamps.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S) -> hm_polog:stabilize_groups(V, S, fun(_AddDots) -> true end).

%% @doc The elements an operation names: the groups of the PO-log its effect touched.
-spec op_groups(term()) -> [elem()].
op_groups(Op) -> elems(Op).

%% @doc {@link stabilize/2} for the elements `Es' only.
-spec stabilize_some(hm_vv:vv(), [elem()], op_state()) -> op_state().
stabilize_some(V, Es, S) -> hm_polog:stabilize_groups(V, Es, S, fun(_AddDots) -> true end).

%% @doc Drop whatever causally precedes `Ts' (all stable elements, older log entries).
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, {_Seq, Log}) ->
    {#{}, hm_polog:reset_groups(Ts, Log)}.

-spec op_value(op_state()) -> ordsets:ordset(elem()).
op_value({Seq, Log}) -> lists:sort(op_unsorted_value({Seq, Log})).

%% @doc The elements, unsorted (an element is in one of the two maps only).
-spec op_unsorted_value(op_state()) -> [elem()].
op_unsorted_value({Seq, Log}) -> maps:keys(Seq) ++ maps:keys(Log).

%% @doc Whether the PO-log holds a timestamp (it stores no empty dot set).
-spec op_has_timestamps(op_state()) -> boolean().
op_has_timestamps({_, Log}) -> map_size(Log) > 0.

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps({_, Log}) -> hm_polog:group_timestamps(Log).
