%% @doc Map of fields to embedded CRDTs, in state, delta and pure op-based flavor.
%%
%% A field is a `{Key, Type}' pair, as in riak_dt's map: the same key may hold fields of
%% different types. Operations: `{update, Key, Type, Op}' applies `Op' (any operation of
%% `Type', nested maps included) to the field; `{remove, Key}' removes every field under `Key'.
%%
%% Semantics ("add-wins fields, reset-remove"): field `{K, T}' is present iff some update of it
%% is not causally followed by a remove of `K'; its value is `T''s value over exactly those
%% updates. So an update concurrent with a remove survives, and the removed state does not come
%% back with it (a counter incremented concurrently with its removal shows only the concurrent
%% increments). Value: `[{Key, Type, Value}]' sorted by `{Key, Type}'.
%%
%% State and delta flavors (Almeida et al., delta-state ORMap, over one shared causal context):
%% a dot map `{K, T} => {dm, #{'$p' => DotSet, '$v' => Store}}'. Each update takes a presence
%% dot (superseding the field's older presence dots) and lets the embedded type take its own
%% dots from the same context; a remove drops every presence dot it has seen and resets the
%% embedded store: by default it drops every dot it has seen, and a type whose dots carry
%% more than their own operation (counters: running totals) leaves offsets instead
%% (`reset_update/2', see {@link hm_ccounter}). A field left with offsets only is absent.
%%
%% Op flavor (the Hypermnesia paper, §4.5–4.7 pure op-based, applied per field): per field a presence PO-log
%% (the dots of updates not followed by a newer update or a remove), a stable presence flag,
%% and the embedded type's own op state. A remove prunes the presence entries it causally
%% follows and calls the embedded type's `reset/2'; a field with no presence left is dropped.
%%
%% Invariants: every field in a state/delta store has a non-empty presence dot set once joined
%% into a state (its value ignores fields without one); no empty nested store is kept.
-module(hm_map).
-behaviour(hm_crdt).

-export([is_op/1, empty_store/0, update/3, delta/3, value/1, reset_update/2, reset_delta/2]).
-export([op_new/0, prepare/3, effect/4, stabilize/2, reset/2, op_value/1, op_timestamps/1]).

-type field() :: {term(), hm_crdt:type()}.
%% Per field: stable presence, presence log, embedded op state.
-type op_state() :: #{field() => {boolean(), #{hm_vv:dot() => true}, term()}}.

%% @doc `{update, Key, Type, Op}' with `Op' an operation of `Type', or `{remove, Key}'.
-spec is_op(term()) -> boolean().
is_op({update, _Key, Type, Op}) -> hm_crdt:is_op(Type, Op);
is_op({remove, _Key}) -> true;
is_op(_) -> false.

%%% ------------------------------------------------------------- state and delta

-spec empty_store() -> hm_dcc:store().
empty_store() -> {dm, #{}}.

-spec update(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
update({update, K, T, Op}, R, {{dm, M}, Ctx}) ->
    F = {K, T},
    {_, V} = field(F, M),
    {PDot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {V1, Ctx2} = (hm_crdt:module(T)):update(Op, R, {V, Ctx1}),
    {{dm, M#{F => field_store(#{PDot => true}, V1)}}, Ctx2};
update({remove, K}, R, Dcc = {{dm, M}, _}) ->
    reset_fields(fields_of(K, M), R, Dcc).

-spec delta(term(), hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
delta({update, K, T, Op}, R, {{dm, M}, Ctx}) ->
    F = {K, T},
    {P, V} = field(F, M),
    {PDot, Ctx1} = hm_node_clock:next_dot(R, Ctx),
    {VDelta, VCtx} = (hm_crdt:module(T)):delta(Op, R, {V, Ctx1}),
    FieldDelta = {dm, #{'$p' => #{PDot => true}, '$v' => VDelta}},
    {{dm, #{F => FieldDelta}},
     hm_node_clock:join(VCtx, hm_node_clock:from_dots([PDot | maps:keys(P)]))};
delta({remove, K}, R, Dcc = {{dm, M}, _}) ->
    reset_fields_delta(fields_of(K, M), R, Dcc).

%% @doc A map embedded in a map whose key is removed: every field is reset.
-spec reset_update(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_update(R, Dcc = {{dm, M}, _}) -> reset_fields(maps:keys(M), R, Dcc).

-spec reset_delta(hm_vv:replica(), hm_dcc:dcc()) -> hm_dcc:dcc().
reset_delta(R, Dcc = {{dm, M}, _}) -> reset_fields_delta(maps:keys(M), R, Dcc).

%% Remove fields: presence dots go, the embedded store is reset (see reset_store/3).
reset_fields(Fs, R, {{dm, M}, Ctx}) ->
    lists:foldl(fun(F = {_, T}, {{dm, Acc}, C}) ->
                        {_, V} = field(F, Acc),
                        {V1, C1} = reset_store(T, R, {V, C}),
                        Acc1 = case hm_dcc:is_empty_store(V1) of
                                   true -> maps:remove(F, Acc);
                                   false -> Acc#{F => {dm, #{'$v' => V1}}}
                               end,
                        {{dm, Acc1}, C1}
                end, {{dm, M}, Ctx}, Fs).

reset_fields_delta(Fs, R, {{dm, M}, Ctx}) ->
    {Store, DCtx, _} =
        lists:foldl(fun(F = {_, T}, {SAcc, DC, C}) ->
                            {P, V} = field(F, M),
                            {VD, VC} = reset_store_delta(T, R, {V, C}),
                            Seen = hm_node_clock:join(VC, hm_node_clock:from_dots(maps:keys(P))),
                            {SAcc#{F => {dm, #{'$v' => VD}}}, hm_node_clock:join(DC, Seen),
                             hm_node_clock:join(C, VC)}
                    end, {#{}, hm_node_clock:new(), Ctx}, Fs),
    {{dm, Store}, DCtx}.

%% The embedded type's own reset where it has one (counters keep offsets), else drop it all.
reset_store(T, R, {V, Ctx}) ->
    M = hm_crdt:module(T),
    case has_reset(M) of
        true -> M:reset_update(R, {V, Ctx});
        false -> {M:empty_store(), Ctx}
    end.

reset_store_delta(T, R, {V, Ctx}) ->
    M = hm_crdt:module(T),
    case has_reset(M) of
        true -> M:reset_delta(R, {V, Ctx});
        false -> {M:empty_store(), hm_node_clock:from_dots(hm_dcc:store_dots(V))}
    end.

has_reset(M) ->
    _ = code:ensure_loaded(M),
    erlang:function_exported(M, reset_update, 2).

%% Presence dots and embedded store of a field (empty ones when absent).
field(F = {_, T}, M) ->
    case M of
        #{F := {dm, FM}} ->
            {maps:get('$p', FM, #{}), maps:get('$v', FM, (hm_crdt:module(T)):empty_store())};
        _ -> {#{}, (hm_crdt:module(T)):empty_store()}
    end.

field_store(P, V) ->
    case hm_dcc:is_empty_store(V) of
        true -> {dm, #{'$p' => P}};
        false -> {dm, #{'$p' => P, '$v' => V}}
    end.

fields_of(K, M) -> [F || F = {K1, _} <- maps:keys(M), K1 =:= K].

%% @doc The present fields as `[{Key, Type, Value}]', sorted.
-spec value(hm_dcc:store()) -> [{term(), hm_crdt:type(), term()}].
value({dm, M}) ->
    [{K, T, (hm_crdt:module(T)):value(V)}
     || {F = {K, T}, _} <- lists:sort(maps:to_list(M)),
        {P, V} <- [field(F, M)], map_size(P) > 0].

%%% ------------------------------------------------------------- pure op-based

-spec op_new() -> op_state().
op_new() -> #{}.

%% @doc The embedded type prepares its own operation (e.g. an LWW timestamp).
-spec prepare(term(), hm_vv:replica(), op_state()) -> term().
prepare({update, K, T, Op}, R, S) ->
    {_, _, N} = op_field({K, T}, S),
    {update, K, T, (hm_crdt:module(T)):prepare(Op, R, N)};
prepare(Op = {remove, _}, _R, _S) -> Op.

op_field(F = {_, T}, S) -> maps:get(F, S, {false, #{}, (hm_crdt:module(T)):op_new()}).

%% @doc An update records a presence entry (pruning the older ones) and is applied to the
%% embedded state; a remove resets every field of the key (the Hypermnesia paper, Listing 9 applied to
%% presence, `reset/2' to the embedded state).
-spec effect(term(), hm_vv:dot(), hm_vv:vv(), op_state()) -> op_state().
effect({update, K, T, Op}, Dot, Ts, S) ->
    F = {K, T},
    {_Stable, PL, N} = op_field(F, S),
    Presence = (hm_polog:concurrent(PL, Ts))#{Dot => true},
    S#{F => {false, Presence, (hm_crdt:module(T)):effect(Op, Dot, Ts, N)}};
effect({remove, K}, _Dot, Ts, S) ->
    lists:foldl(fun(F, Acc) -> reset_field(F, Ts, Acc) end, S, fields_of(K, S)).

reset_field(F = {_, T}, Ts, S) ->
    {_Stable, PL, N} = maps:get(F, S),
    case hm_polog:concurrent(PL, Ts) of
        PL1 when map_size(PL1) =:= 0 -> maps:remove(F, S);
        PL1 -> S#{F := {false, PL1, (hm_crdt:module(T)):reset(Ts, N)}}
    end.


%% @doc Stable presence entries become the stable flag; embedded states stabilize themselves.
-spec stabilize(hm_vv:vv(), op_state()) -> op_state().
stabilize(V, S) ->
    maps:map(fun({_, T}, {Stable, PL, N}) ->
                     N1 = (hm_crdt:module(T)):stabilize(V, N),
                     case map_size(PL) > 0 andalso
                         hm_polog:all_stable(PL, V) of
                         true -> {true, #{}, N1};
                         false -> {Stable, PL, N1}
                     end
             end, S).

%% @doc A map embedded in a map: its key is removed, so every field is.
-spec reset(hm_vv:vv(), op_state()) -> op_state().
reset(Ts, S) -> lists:foldl(fun(F, Acc) -> reset_field(F, Ts, Acc) end, S, maps:keys(S)).

-spec op_value(op_state()) -> [{term(), hm_crdt:type(), term()}].
op_value(S) ->
    [{K, T, (hm_crdt:module(T)):op_value(N)}
     || {{K, T}, {Stable, PL, N}} <- lists:sort(maps:to_list(S)),
        Stable orelse map_size(PL) > 0].

-spec op_timestamps(op_state()) -> non_neg_integer().
op_timestamps(S) ->
    maps:fold(fun({_, T}, {_, PL, N}, Acc) ->
                      Acc + map_size(PL) + (hm_crdt:module(T)):op_timestamps(N)
              end, 0, S).
