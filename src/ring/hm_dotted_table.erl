%% @doc A fragment of a partitioned EC table under `{replication, dotted}', pure: what the
%% table layer's operations (`async_ec' writes, deletes, `delete_object', `clear_table') are
%% as DottedDB requests on one copy ({@link hm_dotted}, after *DottedDB: Anti-Entropy without
%% Merkle Trees, Deletes without Tombstones*, §III "get/put with causal contexts" and §IV,
%% Algorithm 1), and what a copy's `show' effects are as writes to the Mnesia table that
%% mirrors it. {@link hm_dotted_server} runs it; the simulator can run it the same way.
%%
%% An `async_ec' operation carries no causal context. It is taken as a request made with
%% the context of a read of the key on this copy just before:
%% <ul>
%% <li>`{write, Record}': a put superseding every version of the key this copy has seen
%% (versions it has not seen yet stay as siblings);</li>
%% <li>`delete': a delete superseding every version this copy has seen;</li>
%% <li>`{delete_object, Record}': a delete superseding only the versions whose value is
%% `Record' (nothing when this copy shows no such version); the other siblings stay;</li>
%% <li>`clear' (key `'$all''): `delete' of every key this copy shows.</li>
%% </ul>
%%
%% Mirror: the Mnesia table of a dotted fragment is a `bag'; `{show, Key, Values}' becomes
%% the removal of the key's records followed by a write of each value (none: the key is
%% gone), so Mnesia reads show exactly the live versions, siblings included.
%%
%% Invariants: an operation never supersedes a version this copy has not stored; the mirror
%% holds, per key, the values of the key's live versions and nothing else.
-module(hm_dotted_table).

-export([apply_op/2, mirror/1, value_context/3, made/3]).
-export_type([store_op/0]).

-type store_op() :: {delete, term()} | {write, tuple()}.

%% @doc Carry out a table operation `{Key, Op}' on copy `D' (see the module doc).
%% `{error, {bad_op, KeyOp}}' for an operation of another shape.
-spec apply_op({term(), term()}, hm_dotted:state()) ->
          {hm_dotted:state(), [hm_dotted:effect()]} | {error, term()}.
apply_op({Key, {write, Rec}}, D) when is_tuple(Rec) ->
    {_, Ctx} = hm_dotted:get(Key, D),
    ok_or_error(hm_dotted:put(Key, Rec, Ctx, D));
apply_op({Key, delete}, D) ->
    {_, Ctx} = hm_dotted:get(Key, D),
    ok_or_error(hm_dotted:delete(Key, Ctx, D));
apply_op({Key, {delete_object, Rec}}, D) when is_tuple(Rec) ->
    case value_context(Key, Rec, D) of
        none -> {D, []};
        Ctx -> ok_or_error(hm_dotted:delete(Key, Ctx, D))
    end;
apply_op({'$all', clear}, D) ->
    lists:foldl(fun(Key, {Dx, Effs}) ->
                        {Dy, E} = apply_op({Key, delete}, Dx),
                        {Dy, Effs ++ E}
                end, {D, []}, lists:sort(maps:keys(hm_dotted:values(D))));
apply_op(KeyOp, _D) -> {error, {bad_op, KeyOp}}.

ok_or_error({error, _} = E) -> E;
ok_or_error({D, Effs}) -> {D, Effs}.

%% @doc A context naming only the versions of `Key' whose value is `Rec' on copy `D', or
%% `none' when it shows no such version.
-spec value_context(term(), term(), hm_dotted:state()) -> hm_dotted:context() | none.
value_context(Key, Rec, D) ->
    case hm_dotted:objects(D) of
        #{Key := {Vers, _}} ->
            case [Dot || {Dot, {v, V}} <- maps:to_list(Vers), V =:= Rec] of
                [] -> none;
                Dots -> hm_node_clock:encode(hm_node_clock:add_dots(Dots, hm_node_clock:new()))
            end;
        _ -> none
    end.

%% @doc The dots copy `Self' made between its node clocks `Before' and `After' (an
%% operation's own writes: what a `sync_ec' caller waits for the other copies to hold).
-spec made(term(), hm_node_clock:clock(), hm_node_clock:clock()) -> [hm_vv:dot()].
made(Self, Before, After) -> [Dot || Dot = {R, _} <- hm_node_clock:missing(After, Before), R =:= Self].

%% @doc The writes to the Mnesia mirror that carry out a copy's effects, in order (effects
%% other than `show' have none).
-spec mirror([hm_dotted:effect()]) -> [store_op()].
mirror(Effs) ->
    lists:append([[{delete, Key} | [{write, V} || V <- Values, is_tuple(V)]]
                  || {show, Key, Values} <- Effs]).
