%% @doc Hints: writes to an EC table kept on this node while none of the holders of a copy
%% can be reached, handed to a holder once one is back (Dynamo's sloppy quorum and hinted
%% handoff, "Dynamo: Amazon's Highly Available Key-value Store", §4.6). A write on a node
%% with no copy of the table, or of the key's fragment, is passed to a holder
%% ({@link hm_ec_server:submit/3}); when none answers, it becomes a hint, so writes stay
%% available on every side of a partition. Reads on this node show the hints on top of what
%% they read ({@link hm_ec_frag}), so the node reads its own writes meanwhile.
%%
%% Hints live in an ETS table owned by {@link hm_ec_server}, ordered by when they were
%% made; the server hands them off, oldest first, at every refresh (once a second) and
%% before any newer write to the same table leaves this node, so they reach the holders in
%% the order they were made. They are held in memory: a node that stops before a holder is
%% back loses its hints.
%%
%% Session order. Writes passed on may be taken by different holders in turn (the one that
%% took the last is cut off, a hint goes to whichever holder is back first). The node keeps
%% its session per table: the dots of the writes holders took from it ({@link note/2},
%% a version vector, one entry per holder incarnation). Each write passed on, hint or not,
%% carries it, and a holder takes the write only once it has delivered them
%% ({@link hm_ec_table:submit_after/6}); a holder that is behind refuses, the next is tried,
%% and with none the write is kept as a hint. So a node's writes are applied in the order
%% it made them, each causally after the ones before, as writes on a node with a copy are
%% (*Session Guarantees for Weakly Consistent Replicated Data*, §2, Monotonic Writes).
%% The exception: a dot of a holder incarnation that is gone (it restarted without its state)
%% counts as delivered, since what that holder had not sent is lost with it.
%%
%% Invariants: hints of a table are handed off in the order they were made, and a hint is
%% removed only once a holder has applied it; a node's session only grows, and every write
%% a holder took from it after the write with dot `D' was acknowledged is causally after
%% `D' (unless `D''s incarnation is gone).
-module(hm_ec_hints).

-export([init/0, add/2, pending/1, tables/0, remove/2, count/0, apply_key/3, apply_all/2]).
-export([pass_on/4, kept_answer/2, session/1, note/2, session_add/2]).

-define(TAB, hm_ec_hints).
%% below every hint's sequence number and every session entry's origin in the table's order
%% (numbers sort first, and unique integers are far above it): `{Tab, ?BELOW}' comes just
%% before `Tab''s first hint
-define(BELOW, -1.0e300).

-type hint() :: {{atom(), integer()}, {term(), hm_ec_table:op()}}.

%% @doc The order in which a node's writes to one table leave it, pure (the runtime's
%% server and the simulator both run it): the hints `Pending' first, oldest first, each
%% passed to `Try' until one is not taken; then `New' (or `none'), passed to `Try' only when
%% no hint is left, else kept as a hint behind them. `Try(KeyOp, Acc)' hands a write to a
%% reachable holder and says `ok', `unreachable', or `{error, Reason}' when the holders
%% refuse it for good (a write the table can never take: it is dropped, never kept).
%% Returns the ids of the hints done with (handed off, or refused), what became of `New'
%% (`sent'; `kept': the caller adds it to the hints; `{error, Reason}') and `Acc'.
-spec pass_on([{Id, KeyOp}], KeyOp | none,
              fun((KeyOp, Acc) -> {ok | unreachable | {error, term()}, Acc}), Acc) ->
          {[Id], sent | kept | none | {error, term()}, Acc}.
pass_on(Pending, New, Try, Acc0) ->
    {Sent, Left, Acc1} = hand_off(Pending, Try, Acc0, []),
    case {New, Left} of
        {none, _} -> {Sent, none, Acc1};
        {_, [_ | _]} -> {Sent, kept, Acc1};
        {_, []} ->
            case Try(New, Acc1) of
                {ok, Acc2} -> {Sent, sent, Acc2};
                {unreachable, Acc2} -> {Sent, kept, Acc2};
                {{error, _} = Refused, Acc2} -> {Sent, Refused, Acc2}
            end
    end.

hand_off([], _Try, Acc, Sent) -> {lists:reverse(Sent), [], Acc};
hand_off([{Id, KeyOp} | Rest] = All, Try, Acc, Sent) ->
    case Try(KeyOp, Acc) of
        {unreachable, Acc1} -> {lists:reverse(Sent), All, Acc1};
        {_, Acc1} -> hand_off(Rest, Try, Acc1, [Id | Sent])     % taken, or refused for good
    end.

%% @doc The answer to the caller of a write kept as a hint, pure. A hint is issued when it is
%% handed off, with the causal context of the holder that takes it then, not the one its node
%% had when the caller was answered: a delete kept as a hint removes what that holder holds
%% by then, writes made after the caller was answered included. So only an `async' write is
%% answered `ok' (it is accepted, and takes effect when handed off); a `sync' write, which
%% answers once it is applied, is answered `{error, {hinted, Tab}}': applied nowhere yet,
%% kept, and applied when a holder is reachable (as a `sync_timeout', it may take effect
%% later).
-spec kept_answer(atom(), async | sync) -> ok | {error, {hinted, atom()}}.
kept_answer(_Tab, async) -> ok;
kept_answer(Tab, sync) -> {error, {hinted, Tab}}.

%% @doc A session with the dot of one more write a holder took (`none': a write with no
%% dot yet, an update waiting in a CRDT epoch), pure: the pointwise maximum.
-spec session_add(hm_vv:dot() | none, hm_vv:vv()) -> hm_vv:vv().
session_add(none, VV) -> VV;
session_add({O, Seq}, VV) -> hm_vv:join(VV, #{O => Seq}).

%% @doc This node's session on `Tab': the dots of the writes holders took from it.
-spec session(atom()) -> hm_vv:vv().
session(Tab) ->
    %% on every write: a look at the first key of `Tab''s session first, which is all there
    %% is to do when the node passed nothing on (the select compiles its match each time)
    try ets:next(?TAB, {'$session', Tab, ?BELOW}) of
        {'$session', Tab, _} ->
            maps:from_list(ets:select(?TAB, [{{{'$session', Tab, '$1'}, '$2'}, [],
                                              [{{'$1', '$2'}}]}]));
        _ -> #{}
    catch error:badarg -> #{}
    end.

%% @doc Add the dot of a write a holder took to this node's session on `Tab' (atomic: the
%% writes of several processes may be passed on at once).
-spec note(atom(), hm_vv:dot() | none) -> ok.
note(_Tab, none) -> ok;
note(Tab, {O, Seq}) ->
    Key = {'$session', Tab, O},
    try ets:insert_new(?TAB, {Key, Seq}) of
        true -> ok;
        false -> raise(Key, Seq)
    catch error:badarg -> ok
    end.

raise(Key, Seq) ->
    case ets:lookup(?TAB, Key) of
        [{_, Old}] when Old >= Seq -> ok;
        [{_, Old}] ->
            case ets:select_replace(?TAB, [{{Key, Old}, [], [{const, {Key, Seq}}]}]) of
                1 -> ok;
                0 -> raise(Key, Seq)                        % raised meanwhile: look again
            end;
        [] -> note(element(2, Key), {element(3, Key), Seq})
    end.

%% @doc Create the store (by its owner, {@link hm_ec_server}).
-spec init() -> ok.
init() ->
    _ = ets:new(?TAB, [ordered_set, public, named_table, {read_concurrency, true}]),
    ok.

%% @doc Keep `KeyOp' on `Tab' as a hint.
-spec add(atom(), {term(), hm_ec_table:op()}) -> ok.
add(Tab, KeyOp) ->
    true = ets:insert(?TAB, {{Tab, erlang:unique_integer([monotonic])}, KeyOp}),
    ok.

%% @doc The hints on `Tab', oldest first.
-spec pending(atom()) -> [hint()].
pending(Tab) ->
    try ets:next(?TAB, {Tab, ?BELOW}) of
        {Tab, _} -> ets:select(?TAB, [{{{Tab, '_'}, '_'}, [], ['$_']}]);
        _ -> []
    catch error:badarg -> []                    % no store: Hypermnesia is not running here
    end.

%% @doc The tables with hints.
-spec tables() -> [atom()].
tables() ->
    try lists:usort(ets:select(?TAB, [{{{'$1', '_'}, '_'}, [], ['$1']}]))
    catch error:badarg -> []
    end.

%% @doc Forget a hint a holder has applied.
-spec remove(atom(), integer()) -> ok.
remove(Tab, Seq) ->
    true = ets:delete(?TAB, {Tab, Seq}),
    ok.

%% @doc How many hints this node holds.
-spec count() -> non_neg_integer().
count() ->
    try ets:select_count(?TAB, [{{{'_', '_'}, '_'}, [], [true]}])   % not the session rows
    catch error:badarg -> 0
    end.

%% @doc The records of `Key' read from `Tab', with the hints on `Tab' applied in order.
-spec apply_key(atom(), term(), [tuple()]) -> [tuple()].
apply_key(Tab, Key, Records) ->
    Bag = bag(Tab),
    lists:foldl(fun({_, {K, Op}}, Rs) when K =:= Key; K =:= '$all' -> apply_op(Bag, Op, Rs);
                   (_, Rs) -> Rs
                end, Records, pending(Tab)).

%% @doc All records read from `Tab', with its hints applied in order.
-spec apply_all(atom(), [tuple()]) -> [tuple()].
apply_all(Tab, Records) ->
    Bag = bag(Tab),
    lists:foldl(fun({_, {'$all', clear}}, _) -> [];
                   ({_, {K, Op}}, Rs) ->
                        {Mine, Others} = lists:partition(fun(R) -> element(2, R) =:= K end, Rs),
                        Others ++ apply_op(Bag, Op, Mine)
                end, Records, pending(Tab)).

apply_op(false, {write, R}, _) -> [R];
apply_op(true, {write, R}, Rs) -> lists:usort([R | Rs]);
apply_op(_, delete, _) -> [];
apply_op(_, {delete_object, R}, Rs) -> Rs -- [R];
apply_op(_, clear, _) -> [].

bag(Tab) ->
    try mnesia:table_info(Tab, type) of
        Type -> Type =:= bag
    catch _:_ -> false
    end.
