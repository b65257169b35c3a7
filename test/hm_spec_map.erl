%% @doc Declarative specification of the map: field `{K, T}' is present iff some update of it
%% is not causally followed by a remove of `K'; its value is `T''s specification over exactly
%% those updates (their embedded operations, with the same happened-before relation).
-module(hm_spec_map).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

key() -> oneof([k1, k2]).

gen_op() -> gen_op(1).

%% Depth bounds nesting: a map inside a map, no deeper.
gen_op(Depth) ->
    Types = [T || T <- hm_crdt_prop:types(), T =/= map orelse Depth > 0],
    frequency([{5, ?LET(T, oneof(Types), {update, key(), T, nested_op(T, Depth)})},
               {2, {remove, key()}}]).

nested_op(map, Depth) -> gen_op(Depth - 1);
nested_op(T, _) -> (hm_spec:spec_module(T)):gen_op().

spec(History) ->
    Fields = lists:usort([{K, T} || {_, _, {update, K, T, _}, _} <- History]),
    lists:append([field_value(F, History) || F <- Fields]).

field_value({K, T}, History) ->
    Removes = [I || I = {_, _, {remove, K1}, _} <- History, K1 =:= K],
    Live = [{Id, R, Op, Past} || I = {Id, R, {update, K1, T1, Op}, Past} <- History,
                                 K1 =:= K, T1 =:= T,
                                 not lists:any(fun(Rm) -> hm_spec:before(I, Rm) end, Removes)],
    case Live of
        [] -> [];
        _ -> [{K, T, (hm_spec:spec_module(T)):spec(Live)}]
    end.
